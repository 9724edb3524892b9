"""Compare two run directories under a policy: the decision (suite/judge/decision.py), with the
command lines that reproduce each failing cell (suite/flows/repro.py)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from suite.core.decision_records import Cell, DecisionRecord, Repro, RollbackRecord
from suite.core.loaded import LoadedRun
from suite.core.records import Result
from suite.flows.repro import repro_record
from suite.judge import decision
from suite.judge.policy import Policy


def reproducer(base: LoadedRun, cand: LoadedRun) -> decision.Reproducer:
    """How the decision reproduces a failing cell of these two runs."""
    sides = {"baseline": (base.dir, base.run), "candidate": (cand.dir, cand.run)}
    # Sides that sit side by side (an ab folder, a CI job's artifact) are reproduced from there.
    root = base.dir.parent.absolute() if base.dir.parent == cand.dir.parent else None

    def reproduce(cell_id: str, record: Result | None, failing: set[str]) -> Repro | None:
        return repro_record(sides, cell_id, record, failing, root)

    return reproduce


def decide(
    base: LoadedRun,
    cand: LoadedRun,
    policy: Policy,
    *,
    artifacts: Mapping[str, dict[str, str]] | None = None,
    extra_cells: Sequence[Cell] | None = None,
    rollback: RollbackRecord | None = None,
) -> DecisionRecord:
    """The decision record of two runs, each failing cell with its reproduction lines."""
    return decision.decision_of(
        base,
        cand,
        policy,
        reproduce=reproducer(base, cand),
        artifacts=artifacts,
        extra_cells=extra_cells,
        rollback=rollback,
    )
