"""The second look of an A/B: each cell whose timing gate failed or improved in the rounds runs
again alone, with fresh workers on both sides (a fork server of its own, which served no other
cell) and paired rounds of its own, before the verdict stands (suite/judge/second_look.py
judges). Its records are a run directory inside each side's, RUN/alone/.

Inside the whole matrix a side's state persists from cell to cell (its fork server, what ran
just before); a slowdown that lives there and not in the cell is what this look tells apart,
and any false fail of the rounds must now happen twice, independently, to stand."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from suite.core.decision_records import DecisionRecord
from suite.core.spec import CellSpec
from suite.judge.second_look import needs_second_look
from suite.judge.sequential import Design

# The second look's rounds: the policy's looks up to this many rounds (an A/B of one cell alone
# resolves a +5% change on this machine's CPU cells in about 8).
MAX_ROUNDS = 10
# Its time budget, as a share of the policy's budget for the rounds, on top of it.
BUDGET_SHARE = 0.25


def cells_to_look_again(decision: DecisionRecord, cells: Sequence[CellSpec]) -> list[CellSpec]:
    """The cells whose timing gates failed or improved, in the matrix's order."""
    wanted = {c["cell_id"] for c in decision["cells"] if needs_second_look(c["gates"])}
    return [spec for spec in cells if spec.cell_id in wanted]


def alone_design(design: Design) -> Design:
    """The second look's design: the same levels, the looks up to MAX_ROUNDS, a budget of its
    own."""
    looks = tuple(n for n in design.looks if n <= MAX_ROUNDS) or design.looks[:1]
    budget = None if design.budget_s is None else design.budget_s * BUDGET_SHARE
    return replace(design, looks=looks, budget_s=budget, budget_exhausted=False)
