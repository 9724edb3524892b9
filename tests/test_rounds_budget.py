"""What the time budget does to an A/B's rounds, on injected costs: no worker runs and no clock
is read, so the outcome is the same on a fast machine and on a slow or busy one.

The defect these were written for: `--rounds N` kept the policy's budget, so an A/B whose
counting took longer (a slower runner, a busier one) ran fewer rounds than it was asked for, and
a test that needed N paired rounds failed on one machine and passed on the next."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from suite.core.spec import CellSpec
from suite.flows.rounds import Rounds
from suite.judge.policy import load_policy
from suite.judge.sequential import Design

ROUND_COST_S = 10.0  # one side's worker, as the parent charges it (harness.parent_wall_s)


@dataclass
class FakeRun:
    """One side's run: each executed round costs ROUND_COST_S of charged wall time, and its
    record carries a quiet timing of the given p50."""

    p50: float
    rounds: dict[int, dict[str, Any]] = field(default_factory=dict)

    def reusable(self, spec: CellSpec, round_no: int) -> None:
        return None

    def discard(self, spec: CellSpec, round_no: int) -> None:
        self.rounds.pop(round_no, None)

    def execute(self, spec: CellSpec, round_no: int) -> tuple[dict[str, Any], bool]:
        # A small per-round wobble, so that the rounds have a spread to judge.
        p50 = self.p50 * (1.0 + 0.001 * (round_no % 3))
        record = {
            "status": "ok",
            "round": round_no,
            "failure": None,
            "wall_s": ROUND_COST_S,
            "harness": {"parent_wall_s": ROUND_COST_S},
            "timing": {"samples_s": [p50] * 40, "disturbance": {"disturbed": False}},
        }
        self.rounds[round_no] = record
        return record, False

    def records(self, spec: CellSpec) -> list[dict[str, Any]]:
        return [self.rounds[r] for r in sorted(self.rounds)]

    def spent_s(self) -> float:
        return ROUND_COST_S * len(self.rounds)


def _spec() -> CellSpec:
    return CellSpec(workload="w", ref="w", params=(), backend="cpu", profile="smoke")


def _rounds(design: Design, charged_s: float) -> tuple[Rounds, dict[str, FakeRun]]:
    policy = load_policy(None, "research")
    runs = {"baseline": FakeRun(0.010), "candidate": FakeRun(0.010)}
    rounds = Rounds(runs, policy, design, True, None, charged_s=charged_s)  # type: ignore[arg-type]
    return rounds, runs


def test_counting_that_spent_the_budget_leaves_the_looks_one_round() -> None:
    """What the budget is for: the sequential looks stop when counting spent it all."""
    design = Design(looks=(6, 10), budget_s=540.0)
    rounds, runs = _rounds(design, charged_s=600.0)
    ran = rounds.run([_spec()])
    assert ran.budget_exhausted
    assert sorted(runs["baseline"].rounds) == [0]  # the first round measures a round's cost


def test_a_budget_with_room_runs_up_to_the_look_it_reaches() -> None:
    design = Design(looks=(6, 10), budget_s=100.0)  # 20 s a round: 5 rounds fit, not look 6
    rounds, runs = _rounds(design, charged_s=0.0)
    ran = rounds.run([_spec()])
    assert ran.budget_exhausted and sorted(runs["candidate"].rounds) == [0]


def test_a_fixed_design_runs_every_round_it_was_asked_for_whatever_was_charged() -> None:
    policy_design = load_policy(None, "research").design
    assert policy_design.budget_s is not None  # the built-in profile has a budget to ignore
    fixed = policy_design.fixed(6)
    assert fixed.budget_s is None and fixed.looks == (6,)
    rounds, runs = _rounds(fixed, charged_s=10 * policy_design.budget_s)
    ran = rounds.run([_spec()])
    assert not ran.budget_exhausted
    for run in runs.values():
        assert sorted(run.rounds) == list(range(6))


@dataclass
class BusyRun(FakeRun):
    """A side whose every round another process disturbed: counts its executions."""

    executed: int = 0
    aside: int = 0
    notes: dict[int, dict[str, Any]] = field(default_factory=dict)

    def execute(self, spec: CellSpec, round_no: int) -> tuple[dict[str, Any], bool]:
        self.executed += 1
        record, reused = super().execute(spec, round_no)
        record["timing"]["disturbance"]["disturbed"] = True
        return record, reused

    def set_aside(self, spec: CellSpec, round_no: int) -> None:
        self.aside += 1

    def annotate(self, spec: CellSpec, round_no: int, **fields: Any) -> None:
        self.notes[round_no] = fields


def test_a_disturbed_round_runs_again_as_often_as_reruns_says() -> None:
    """ab --reruns (TORCH_MATRIX_RERUNS): 3 by default, 0 keeps the disturbed round as it is."""
    policy = load_policy(None, "research")
    for reruns, executions in ((None, 4), (0, 1), (2, 3)):
        runs = {"baseline": BusyRun(0.010), "candidate": BusyRun(0.010)}
        rounds = Rounds(runs, policy, policy.design.fixed(1), True, None, reruns=reruns)  # type: ignore[arg-type]
        rounds.run([_spec()])
        for run in runs.values():
            assert run.executed == executions and run.aside == executions - 1, reruns
            assert run.notes == (
                {0: {"disturbed_repeats": executions - 1}} if executions > 1 else {}
            )
