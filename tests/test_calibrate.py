"""Calibration: spreads and detectable changes from synthetic A/A runs with planted round-to-round
changes, the warnings ab and plan give before a run, the file's schema, and calibrate end to end."""

from __future__ import annotations

import copy
import json
import math
import socket
import statistics
from pathlib import Path
from typing import Any

import pytest
import yaml
from scipy.stats import norm

from suite.core.errors import InputError, SchemaVersionError
from suite.core.loaded import LoadedRun
from suite.core.spec import CellSpec
from suite.core.validation import validate_file
from suite.flows.calibrate import (
    calibration,
    min_detectable,
    read_calibration,
    resolvable_rounds,
    runner_identity,
    this_runner,
    threshold_warnings,
    write_calibration,
)
from suite.judge.policy import Policy, default_policy_text, load_policy
from suite.judge.sequential import STEADY_STATE_GATES
from suite.report.calibration import TOO_TIGHT, render_calibration
from tests.helpers import cli, planted
from tests.synthetic import ENV, Cell, make_run

# Planted per-round log ratios d (candidate over baseline): sd about 3.4%, mean 0.25%.
PLANTED = [0.03, -0.02, 0.05, -0.04, 0.01, 0.0, -0.01, 0.0, 0.04, -0.035]
TIMING = STEADY_STATE_GATES


def _policy(tmp_path: Path, *, p50: float | None = None, budget_s: float | None = None) -> Policy:
    """The built-in policy, research profile, with a changed latency_p50 threshold or budget."""
    doc = yaml.safe_load(default_policy_text())
    research = doc["profiles"]["research"]
    if p50 is not None:
        research["gates"]["latency_p50"]["threshold"] = p50
    if budget_s is not None:
        research["statistics"]["budget_s"] = budget_s
    path = tmp_path / f"policy-{p50}-{budget_s}.yaml"
    path.write_text(yaml.safe_dump(doc), encoding="utf-8")
    return load_policy(path, "research")


def _sides(tmp_path: Path, cell: Cell, d: list[float]) -> tuple[LoadedRun, LoadedRun]:
    """An A/A whose candidate differs from the baseline by exactly e^d[i] in round i: no noise
    inside a process (spread 0), so every statistic of a round carries the planted ratio."""
    quiet = Cell(workload=cell.workload, case=cell.case, spread=0.0)
    base = make_run(tmp_path / "b", [quiet], run_id="20261130T100000Z-aaaaaa", rounds=len(d))
    cand = make_run(
        tmp_path / "c",
        [quiet],
        run_id="20261130T100000Z-bbbbbb",
        rounds=len(d),
        scales=[math.exp(x) for x in d],
    )
    return LoadedRun.load(base), LoadedRun.load(cand)


def _calibrate(
    tmp_path: Path, policy: Policy, d: list[float] = PLANTED, cell: Cell | None = None
) -> dict[str, Any]:
    base, cand = _sides(tmp_path, cell or Cell(), d)
    runner = runner_identity(ENV)
    return calibration(base.results, cand.results, policy, runner, created_at="2026-12-01T00:00Z")


def _spec(workload: str = "w", case: str = "a") -> CellSpec:
    return CellSpec(workload, workload, (("case", case),), "cpu", "smoke")


def _here(doc: dict[str, Any]) -> dict[str, Any]:
    """The calibration as if measured on this machine."""
    moved = copy.deepcopy(doc)
    moved["runner"].update(this_runner())
    return moved


def test_spread_and_mean_are_those_of_the_planted_log_ratios(tmp_path: Path) -> None:
    doc = _calibrate(tmp_path, load_policy(None, "research"))
    assert doc["rounds"] == len(PLANTED)
    (cell,) = doc["cells"]
    assert cell["cell_id"] == "w.a@cpu" and cell["status"] == "ok"
    assert set(cell["gates"]) == set(TIMING)  # no compile metric: compile_time has no rounds
    for name in TIMING:
        gate = cell["gates"][name]
        assert gate["rounds"] == len(PLANTED)
        assert gate["spread"] == pytest.approx(statistics.stdev(PLANTED), rel=1e-9)
        assert gate["mean"] == pytest.approx(statistics.fmean(PLANTED), abs=1e-12)


def test_min_detectable_and_rounds_needed_from_normal_quantiles(tmp_path: Path) -> None:
    policy = load_policy(None, "research")
    doc = _calibrate(tmp_path, policy)
    design = policy.design
    # The budget (540 s) holds 270 rounds of 2 s (1 s a side): the last look, 40, is the limit.
    assert doc["resolvable_rounds"] == design.looks[-1] == 40
    assert doc["cells"][0]["round_wall_s"] == pytest.approx(2.0)
    z = norm.isf(design.fail_level) + norm.isf(design.pass_level)
    s = statistics.stdev(PLANTED)
    for name in TIMING:
        gate = doc["cells"][0]["gates"][name]
        threshold = policy.gates[name].threshold
        assert threshold is not None and gate["threshold"] == threshold
        assert gate["min_detectable"] == pytest.approx(math.exp(z * s / math.sqrt(40)) - 1)
        needed = math.ceil((z * s / math.log(1 + threshold)) ** 2)
        assert gate["rounds_needed"] == max(2, needed)  # a spread needs two rounds


def test_the_budget_limits_rounds_to_the_last_look_it_reaches(tmp_path: Path) -> None:
    policy = _policy(tmp_path, budget_s=30)
    base, cand = _sides(tmp_path, Cell(), PLANTED)
    for records in (*base.results.values(), *cand.results.values()):
        for record in records:  # the parent's wall time is what the budget is charged
            record["harness"] = {"parent_wall_s": 1.5}
    doc = calibration(base.results, cand.results, policy, runner_identity(ENV))
    # 30 s / 3 s a round: 10 rounds start, and 10 is a look.
    assert doc["cells"][0]["round_wall_s"] == pytest.approx(3.0)
    assert doc["resolvable_rounds"] == 10
    z = norm.isf(policy.design.fail_level) + norm.isf(policy.design.pass_level)
    expected = math.exp(z * statistics.stdev(PLANTED) / math.sqrt(10)) - 1
    assert doc["cells"][0]["gates"]["latency_p50"]["min_detectable"] == pytest.approx(expected)
    # 29 s: still 10 rounds start (a round starts while under budget); 25 s: 9, so look 6.
    for budget, rounds in ((29, 10), (25, 6)):
        again = calibration(
            base.results, cand.results, _policy(tmp_path, budget_s=budget), runner_identity(ENV)
        )
        assert again["resolvable_rounds"] == rounds


def test_a_budget_that_reaches_no_look_resolves_nothing(tmp_path: Path) -> None:
    policy = _policy(tmp_path, budget_s=5)  # 3 rounds of 2 s, the first look is at 6
    doc = _calibrate(tmp_path, policy)
    assert doc["resolvable_rounds"] is None
    assert all(g["min_detectable"] is None for g in doc["cells"][0]["gates"].values())
    (line,) = threshold_warnings(_here(doc), policy, [_spec()], this_runner())
    assert "fewer than the first look at 6" in line and "inconclusive" in line


def test_warns_for_a_tight_threshold_only(tmp_path: Path) -> None:
    doc = _here(_calibrate(tmp_path, load_policy(None, "research")))
    s = statistics.stdev(PLANTED)
    resolvable = doc["cells"][0]["gates"]["latency_p50"]["min_detectable"]
    assert 0.01 < resolvable < 0.15
    tight = _policy(tmp_path, p50=0.01)
    (line,) = threshold_warnings(doc, tight, [_spec()], this_runner())
    assert line == (
        f"w.a@cpu latency_p50: threshold 1.0% is below the {resolvable:.1%} this runner can "
        f"resolve in 40 rounds (spread {s:.1%}); expect inconclusive"
    )
    assert threshold_warnings(doc, load_policy(None, "research"), [_spec()], this_runner()) == []
    # Cells not selected, or not calibrated, warn about nothing.
    assert threshold_warnings(doc, tight, [], this_runner()) == []
    assert threshold_warnings(doc, tight, [_spec(case="b")], this_runner()) == []


def test_warnings_follow_the_policy_in_use_not_the_calibrated_one(tmp_path: Path) -> None:
    """Calibrated under a generous budget, checked under a tight one: fewer rounds fit, so a
    threshold that passed before no longer does."""
    doc = _here(_calibrate(tmp_path, _policy(tmp_path, p50=0.04)))
    assert threshold_warnings(doc, _policy(tmp_path, p50=0.04), [_spec()], this_runner()) == []
    (line,) = threshold_warnings(
        doc, _policy(tmp_path, p50=0.04, budget_s=12), [_spec()], this_runner()
    )
    assert "threshold 4.0%" in line and "in 6 rounds" in line


def test_another_runner_warns_once(tmp_path: Path) -> None:
    doc = _calibrate(tmp_path, load_policy(None, "research"), cell=Cell())
    other = {"hostname": "runner-2", "cpu_model": "Test CPU"}
    specs = [_spec(), _spec(case="b")]
    (line,) = threshold_warnings(doc, _policy(tmp_path, p50=0.001), specs, other)
    assert "another runner (runner-1, Test CPU)" in line and "runner-2" in line
    # An environment record of the same machine is as good as a runner identity.
    warned = threshold_warnings(doc, _policy(tmp_path, p50=0.001), specs, ENV)
    assert len(warned) == 1 and warned[0].startswith("w.a@cpu latency_p50:")


def test_the_written_file_is_schema_checked(tmp_path: Path) -> None:
    doc = _calibrate(tmp_path, load_policy(None, "research"))
    path = tmp_path / "calibration.json"
    write_calibration(path, doc)
    assert validate_file(path) == "torch-matrix/calibration"
    assert read_calibration(path) == doc
    code, out, _ = cli("validate", str(path))
    assert code == 0 and "(torch-matrix/calibration)" in out
    bad = copy.deepcopy(doc)
    bad["cells"][0]["gates"]["latency_p50"]["spread"] = "wide"
    with pytest.raises(InputError, match=r"::\$\.cells\[0\]\.gates\.latency_p50\.spread"):
        write_calibration(tmp_path / "bad.json", bad)
    assert not (tmp_path / "bad.json").exists()
    (tmp_path / "future.json").write_text(json.dumps({**doc, "schema_version": 2}))
    with pytest.raises(SchemaVersionError, match="upgrade torch-matrix"):
        read_calibration(tmp_path / "future.json")


def test_table_flags_thresholds_below_resolution(tmp_path: Path) -> None:
    text = render_calibration(_calibrate(tmp_path, _policy(tmp_path, p50=0.01)))
    rows = {line.split()[1]: line for line in text.splitlines() if line.startswith("w.a@cpu")}
    assert set(rows) == set(TIMING)
    assert rows["latency_p50"].endswith(TOO_TIGHT)
    assert not rows["latency_p95"].endswith(TOO_TIGHT)
    assert "10 A/A rounds" in text and "verdicts can rest on 40 rounds" in text


def _quick_calibration(tmp_path: Path) -> Path:
    """A synthetic calibration of this machine for the planted quick workload's n=8 cell."""
    doc = _here(_calibrate(tmp_path, load_policy(None, "research"), cell=Cell("quick", "8")))
    path = tmp_path / "quick.json"
    write_calibration(path, doc)
    return path


def test_plan_finds_the_calibration_in_the_current_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calibrated = _quick_calibration(tmp_path)
    work = tmp_path / "work"
    work.mkdir()
    (work / "torch-matrix-calibration.json").write_bytes(calibrated.read_bytes())
    tight = _policy(tmp_path, p50=0.001)
    monkeypatch.chdir(work)
    code, out, err = cli(
        "plan", "--workload", planted("Quick"), "--backend", "cpu", "--policy", tight.file
    )
    assert code == 0, err
    json.loads(out)  # the warnings go to stderr: stdout stays one line of JSON
    assert "using the calibration in torch-matrix-calibration.json" in err
    assert "warning: quick.8@cpu latency_p50: threshold 0.1% is below" in err
    assert err.count("warning: ") == 1


def test_ab_warns_before_anything_runs(tmp_path: Path) -> None:
    tight = _policy(tmp_path, p50=0.001)
    code, _, err = cli(
        "ab",
        "--workload",
        planted("Quick"),
        "--policy",
        tight.file,
        "--calibration",
        str(_quick_calibration(tmp_path)),
    )
    # No candidate: ab stops before preparing a side, yet after the warnings.
    assert code == 2 and "give the candidate side" in err
    assert err.index("warning: quick.8@cpu latency_p50") < err.index("give the candidate side")


def test_a_bad_calibration_file_is_an_input_error(tmp_path: Path) -> None:
    path = _quick_calibration(tmp_path)
    doc = json.loads(path.read_text())
    doc["cells"][0]["round_wall_s"] = -1
    path.write_text(json.dumps(doc))
    code, _, err = cli("plan", "--workload", planted("Quick"), "--calibration", str(path))
    assert code == 2
    assert f"{path}::$.cells[0].round_wall_s:" in err
    code, _, err = cli(
        "plan", "--workload", planted("Quick"), "--calibration", str(tmp_path / "none.json")
    )
    assert code == 2 and "none.json: file not found" in err


def test_calibrate_refuses_too_few_rounds_and_an_existing_file(tmp_path: Path) -> None:
    code, _, err = cli("calibrate", "--rounds", "3", "--workload", planted("Quick"))
    assert code == 2 and "--rounds" in err
    existing = tmp_path / "cal.json"
    existing.write_text("{}")
    code, _, err = cli(
        "calibrate", "--workload", planted("Quick"), "--backend", "cpu", "--out", str(existing)
    )
    assert code == 2 and "already exists; pass --force" in err


@pytest.mark.slow
@pytest.mark.alone  # every one of its 4 timed rounds must be undisturbed
def test_calibrate_then_plan_warns_end_to_end(tmp_path: Path) -> None:
    out = tmp_path / "calibration.json"
    code, stdout, err = cli(
        "calibrate",
        "--workload",
        planted("Quick"),
        "--backend",
        "cpu",
        "--cell",
        "quick.8@cpu",
        "--rounds",
        "4",
        "--out",
        str(out),
        "--runs",
        str(tmp_path / "runs"),
    )
    assert code == 0, err
    assert "min detectable" in stdout and "quick.8@cpu" in stdout
    assert validate_file(out) == "torch-matrix/calibration"
    doc = read_calibration(out)
    assert doc["rounds"] == 4 and doc["runner"]["hostname"] == socket.gethostname()
    assert "cpu" in doc["runner"]["backends"]
    (cell,) = doc["cells"]
    assert cell["cell_id"] == "quick.8@cpu" and cell["round_wall_s"] > 0
    assert cell["gates"]["latency_p50"]["rounds"] == 4
    assert cell["gates"]["latency_p50"]["spread"] > 0
    for role in ("baseline", "candidate"):
        assert validate_file(tmp_path / "runs" / role / "run.json") == "torch-matrix/run"
    # A threshold below what this runner resolves, however quiet it is: half the change that the
    # calibration's own spread tells in the rounds the budget reaches (a fixed 0.1% was above
    # it on a runner whose other core was busy and this one steady).
    design = load_policy(None, "research").design
    rounds = resolvable_rounds(design, cell["round_wall_s"])
    assert rounds is not None
    tight = _policy(
        tmp_path, p50=min_detectable(cell["gates"]["latency_p50"]["spread"], rounds, design) / 2
    )
    code, stdout, err = cli(
        "plan",
        "--workload",
        planted("Quick"),
        "--backend",
        "cpu",
        "--policy",
        tight.file,
        "--calibration",
        str(out),
    )
    assert code == 0, err
    assert json.loads(stdout)["include"]
    assert "warning: quick.8@cpu latency_p50: threshold " in err and "is below the" in err
    assert "expect inconclusive" in err
