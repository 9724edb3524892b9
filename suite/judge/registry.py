"""Which function judges which gate: one registry over every gate the policy can name
(policy.GATE_NEEDS), and the loop that judges one cell with it. Adding a gate means a function
and an entry here, its name in policy.GATE_NEEDS (with the fields it needs), and a row of the
README's gate table (a test holds the two equal). Gate names are still read elsewhere, not to
judge: flows/ab.py runs the rollback checks and the counting processes only where the policy
names the rollback and instructions gates, and report/table.py orders the columns."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from suite.core.decision_records import GateRecord
from suite.judge.convergence import convergence_gate
from suite.judge.gates import (
    budget_gate,
    correctness_gate,
    memory_gate,
    side_status,
    status_gate,
    timing_gate,
)
from suite.judge.instructions import instructions_gate
from suite.judge.metric_gates import METRIC_GATES, drift
from suite.judge.policy import Gate, Policy
from suite.judge.round_metrics import ROUND_METRICS
from suite.judge.sequential import TIMING_GATES, Design
from suite.judge.verdicts import NO_DIRS, Dirs, Record, failure_message, failure_mode


@dataclass
class Inputs:
    """What the gates of one cell are judged from."""

    base: Sequence[Record]
    cand: Sequence[Record]
    comparable: bool
    design: Design
    status: GateRecord | None = field(default=None)  # the status verdict, once judged
    base_counts: Sequence[Record] = ()  # counting processes (suite/execute/counting.py)
    cand_counts: Sequence[Record] = ()
    dirs: Dirs = NO_DIRS  # where the sides' saved files lie

    def status_of(self, gate: Gate) -> GateRecord:
        """The cell's status verdict; correctness needs it even where the policy has no status
        gate, and then it is judged under the first gate's name, as before."""
        if self.status is None or gate.name == "status":
            # The candidate's failure, else the baseline's: a side that lacks a package says so.
            message = next((m for r in (*self.cand, *self.base) if (m := failure_message(r))), "")
            message = message.splitlines()[0][:300] if message else ""
            dependency = bool(self.base and self.cand) and all(
                failure_mode(r) == "dependency" for r in [*self.base, *self.cand]
            )
            self.status = status_gate(
                gate, side_status(self.base), side_status(self.cand), message, dependency=dependency
            )
        return self.status


GateFn = Callable[[Gate, Inputs], "GateRecord | None"]

# Gates about speed and memory: a failure of one earns a profiler trace of both sides and is
# reproduced by pairing the sides again (an ab line), since one side alone shows nothing.
PERFORMANCE_GATES = (*TIMING_GATES, *ROUND_METRICS, "peak_memory", "memory_budget")


def _metric(name: str) -> GateFn:
    fn = METRIC_GATES[name]
    return lambda gate, i: fn(gate, i.base, i.cand)


def _timing(gate: Gate, i: Inputs) -> GateRecord | None:
    return timing_gate(gate, i.base, i.cand, i.design, comparable=i.comparable)


REGISTRY: dict[str, GateFn] = {
    "status": lambda gate, i: i.status_of(gate),
    "correctness": lambda gate, i: correctness_gate(gate, i.base, i.cand, i.status_of(gate)),
    **{name: _timing for name in (*TIMING_GATES, *ROUND_METRICS)},
    "peak_memory": lambda gate, i: memory_gate(gate, i.base, i.cand, i.comparable),
    "memory_budget": lambda gate, i: budget_gate(gate, i.cand),
    **{name: _metric(name) for name in METRIC_GATES},
    "drift": lambda gate, i: drift(gate, i.base, i.cand, i.dirs),
    "convergence": lambda gate, i: convergence_gate(gate, i.base, i.cand),
    # The rollback gate is not judged per cell: suite/flows/rollback.py adds its own cells.
    "rollback": lambda gate, i: None,
    # Nor is scaling: suite/judge/scaling.py judges the cells of one case across worlds.
    "scaling": lambda gate, i: None,
    "instructions": lambda gate, i: instructions_gate(
        gate, i.base_counts, i.cand_counts, [*i.base, *i.cand], i.dirs
    ),
}


def evaluate_cell(
    policy: Policy,
    base: Sequence[Record],
    cand: Sequence[Record],
    comparable: bool,
    design: Design | None = None,
    counts: tuple[Sequence[Record], Sequence[Record]] = ((), ()),
    dirs: Dirs = NO_DIRS,
) -> list[GateRecord]:
    """Every gate the policy names that applies to this cell, in the policy's order; counts are
    the two sides' counting processes, for the instructions gate, and dirs the folders the
    sides' saved files lie in, for the drift and instructions gates."""
    inputs = Inputs(base, cand, comparable, design or policy.design, None, *counts, dirs)
    out = []
    for gate in policy.gates.values():
        result = REGISTRY[gate.name](gate, inputs)
        if result is not None:
            out.append(result)
    return out
