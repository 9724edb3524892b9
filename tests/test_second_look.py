"""A timing fail stands only when a second look repeats it: the cell alone, fresh workers on both
sides, rounds of its own (suite/judge/second_look.py, suite/flows/second_look.py). Judged here
on synthetic runs whose second look repeats the fail, does not, or never ran; end to end on a
planted side whose fork server, once it served one cell, slows the next one."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from suite.core.loaded import LoadedRun
from suite.core.results import ALONE_DIR
from suite.core.validation import validate_file
from suite.flows.compare import decide
from suite.flows.second_look import MAX_ROUNDS, alone_design
from suite.judge.policy import load_policy
from suite.judge.sequential import TIMING_GATES, Design
from tests.helpers import TESTS, cli
from tests.synthetic import Cell, make_run

SLOWER = Cell(level_s=0.013)  # +30%, beyond the research profile's 15%


def _decide(tmp_path: Path, alone_cand: Cell | None) -> dict[str, Any]:
    base = make_run(tmp_path / "b", [Cell()], run_id="20261130T100000Z-aaaaaa", rounds=6, seed=1)
    cand = make_run(tmp_path / "c", [SLOWER], run_id="20261130T100000Z-bbbbbb", rounds=6, seed=2)
    if alone_cand is not None:
        make_run(base / ALONE_DIR, [Cell()], run_id="20261130T101000Z-cccccc", rounds=6, seed=3)
        make_run(cand / ALONE_DIR, [alone_cand], run_id="20261130T101000Z-dddddd", rounds=6, seed=4)
    policy = load_policy(None, "research")
    return decide(LoadedRun.load(base), LoadedRun.load(cand), policy)


def _p50(decision: dict[str, Any]) -> dict[str, Any]:
    (cell,) = decision["cells"]
    return next(g for g in cell["gates"] if g["gate"] == "latency_p50")


def test_a_fail_the_cell_alone_repeats_stands(tmp_path: Path) -> None:
    gate = _p50(_decide(tmp_path, SLOWER))
    assert gate["verdict"] == "fail", gate["message"]
    assert gate["second_look"]["verdict"] == "fail"
    assert "repeated alone" in gate["message"]


def test_a_fail_the_cell_alone_does_not_repeat_is_inconclusive(tmp_path: Path) -> None:
    decision = _decide(tmp_path, Cell())
    gate = _p50(decision)
    assert gate["verdict"] == "inconclusive" and gate["undecided"] == "unconfirmed"
    assert gate["second_look"]["verdict"] == "pass"
    # Both figures: the matrix's +30% and the alone look's ~0%.
    assert "+30" in gate["message"] and "alone" in gate["message"], gate["message"]
    assert gate["change"] == pytest.approx(0.3, abs=0.02)
    assert abs(gate["second_look"]["change"]) < 0.02
    assert decision["decision"] != "adopt"  # an undecided soft gate still holds the adopt back


def test_without_a_second_look_the_first_look_stands_and_says_so(tmp_path: Path) -> None:
    gate = _p50(_decide(tmp_path, None))
    assert gate["verdict"] == "fail"
    assert "no second look ran" in gate["message"] and "second_look" not in gate


def test_the_decision_with_a_second_look_is_schema_valid(tmp_path: Path) -> None:
    decision = _decide(tmp_path, Cell())
    path = tmp_path / "decision.json"
    path.write_text(json.dumps(decision))
    assert validate_file(path) == "torch-matrix/decision"


def test_the_second_look_keeps_the_levels_and_has_a_budget_of_its_own() -> None:
    design = Design(looks=(6, 10, 14, 20), budget_s=540.0, budget_exhausted=True)
    alone = alone_design(design)
    assert alone.looks == tuple(n for n in design.looks if n <= MAX_ROUNDS)
    assert (alone.fail_level, alone.pass_level) == (design.fail_level, design.pass_level)
    assert alone.budget_s is not None and 0 < alone.budget_s < 540.0
    assert not alone.budget_exhausted
    assert alone_design(Design(looks=(40,))).looks == (40,)  # a fixed --rounds design


POLICY = """\
version: 1
kind: torch-matrix/policy
default_profile: state
rules:
  - {severity: soft, verdicts: [fail, new-failure], decision: defer,
     reason: "a performance gate regressed beyond its threshold"}
profiles:
  state:
    fleet_backends: [cpu]
    gates:
      status:       {severity: hard, required: true}
      latency_p50:  {severity: soft, threshold: 0.15}
"""


@pytest.mark.slow
@pytest.mark.alone  # the planted cell must be timed without another test beside it
def test_a_side_whose_state_slows_a_later_cell_is_not_a_regression(tmp_path: Path) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY)
    markers = tmp_path / "markers"
    markers.mkdir()
    wrapper = tmp_path / "python-stateful"
    wrapper.write_text(
        f'#!/bin/sh\nexport TORCH_MATRIX_TEST_SIDE_STATE={markers}\nexec {sys.executable} "$@"\n'
    )
    wrapper.chmod(0o755)
    out = tmp_path / "ab"
    code, stdout, err = cli(
        "ab", "--baseline", sys.executable, "--candidate", str(wrapper),
        "--workload", f"{TESTS / 'plugins' / 'side_state.py'}:SideState",
        "--backend", "cpu", "--rounds", "6", "--policy", str(policy), "--out", str(out),
        "--format", "json",
    )  # fmt: skip
    decision = json.loads(stdout)
    cells = {c["cell_id"].split(".")[1].split("@")[0]: c for c in decision["cells"]}
    hit = {g["gate"]: g for g in cells["hit"]["gates"]}
    # Inside the matrix the planted state made `hit` slower on the candidate in every round;
    # the second look ran it alone, from a fork server that served nothing before, and the
    # fail did not repeat.
    assert hit["latency_p50"]["second_look"]["verdict"] != "fail", hit["latency_p50"]
    assert hit["latency_p50"]["verdict"] != "fail", hit["latency_p50"]["message"]
    assert "did not repeat" in hit["latency_p50"]["message"]
    assert (out / "candidate" / ALONE_DIR / "run.json").is_file()
    alone = json.loads((out / "candidate" / ALONE_DIR / "run.json").read_text())
    assert {c["cell_id"] for c in alone["cells"]} == {cells["hit"]["cell_id"]}
    assert "second look" in decision["phases"]
    gates = [g for c in decision["cells"] for g in c["gates"] if g["gate"] in TIMING_GATES]
    assert not [g for g in gates if g["verdict"] == "fail"], err
    assert validate_file(out / "decision.json") == "torch-matrix/decision"
    assert code in (0, 5), err


@pytest.mark.parametrize(
    ("change", "sd", "at_most", "at_least"),
    [
        (0.0, 0.10, 0.0005, 0.0),  # A/A, a noisy cell: a false fail must now happen twice
        (0.30, 0.05, 1.0, 0.99),  # a clear regression: both looks find it
    ],
)
def test_a_fail_needs_both_looks_seeded_simulation(
    change: float, sd: float, at_most: float, at_least: float
) -> None:
    """Round values d ~ N(ln(1 + change), sd), the research profile's design for the rounds
    and its second look (looks up to 10 rounds): how often a fail stands."""
    import math

    import numpy as np

    from suite.judge.sequential import judge

    design = load_policy(None, "research").design
    alone = alone_design(design)
    rng = np.random.default_rng(49)
    trials, first, both = 4000, 0, 0
    for _ in range(trials):
        d = rng.normal(math.log1p(change), sd, max(design.looks))
        if judge(list(d), 0.15, design).outcome != "fail":
            continue
        first += 1
        again = rng.normal(math.log1p(change), sd, max(alone.looks))
        both += judge(list(again), 0.15, alone).outcome == "fail"
    assert both <= first
    assert both / trials <= at_most and both / trials >= at_least, (first, both)
