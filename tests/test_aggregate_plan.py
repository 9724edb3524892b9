"""`aggregate --plan`: every planned job and cell accounted for. A job that did not report, or a
cell missing from a job's results, is untested with the reason, and the decision is never adopt;
a decision over nothing judged is never adopt either."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers import cli
from tests.synthetic import Cell, make_run


def _job(root: Path, name: str, cells: list[Cell], seed: int) -> None:
    job = root / f"torch-matrix-job~pr~{name}"
    base = [Cell(workload=c.workload, case=c.case) for c in cells]
    ids = (f"20261201T10000{seed}Z-0000b{seed}", f"20261201T11000{seed}Z-0000c{seed}")
    make_run(job / "baseline", base, run_id=ids[0], seed=seed, job=name)
    make_run(job / "candidate", cells, run_id=ids[1], seed=seed, job=name)


def _plan(path: Path, jobs: dict[str, list[str]]) -> Path:
    include = [
        {"job": name, "backend": name.split("-")[0], "runs-on": ["x"], "cells": " ".join(cells)}
        for name, cells in jobs.items()
    ]
    path.write_text(json.dumps({"include": include}))
    return path


def _aggregate(tmp_path: Path, *extra: str) -> tuple[int, dict, str]:  # type: ignore[type-arg]
    out = tmp_path / "decision"
    code, _, stderr = cli("aggregate", str(tmp_path / "jobs"), "--out", str(out), *extra)
    doc = json.loads((out / "decision.json").read_text()) if code != 2 else {}
    return code, doc, stderr


def test_a_job_that_did_not_report_is_untested_and_never_adopt(tmp_path: Path) -> None:
    _job(tmp_path / "jobs", "cpu-1", [Cell(workload="sdpa", case="a")], 1)
    plan = _plan(tmp_path / "plan.json", {"cpu-1": ["sdpa.a@cpu"], "cpu-2": ["mlp.b@cpu"]})
    # Without the plan, the job that reported decides alone: adopt.
    code, alone, _ = _aggregate(tmp_path)
    assert alone["decision"] == "adopt", alone["reasons"]
    code, doc, stderr = _aggregate(tmp_path, "--plan", str(plan), "--jobs-result", "failure")
    assert doc["decision"] == "defer" and code != 0, stderr
    assert doc["reasons"][0] == (
        "job cpu-2 did not report: the bench jobs ended failure: 1 planned cell untested "
        "(cpu: mlp.b@cpu)"
    )
    (missing,) = [c for c in doc["cells"] if c["cell_id"] == "mlp.b@cpu"]
    (gate,) = missing["gates"]
    assert gate["gate"] == "status" and gate["verdict"] == "untested"
    assert gate["message"] == "job cpu-2 did not report: the bench jobs ended failure"
    assert missing["row_id"] == "mlp@cpu"


def test_a_cell_missing_from_a_job_is_untested_with_the_reason(tmp_path: Path) -> None:
    _job(tmp_path / "jobs", "cpu-1", [Cell(workload="sdpa", case="a")], 1)
    plan = _plan(tmp_path / "plan.json", {"cpu-1": ["sdpa.a@cpu", "sdpa.b@cpu"]})
    _, doc, _ = _aggregate(tmp_path, "--plan", str(plan), "--jobs-result", "success")
    (missing,) = [c for c in doc["cells"] if c["cell_id"] == "sdpa.b@cpu"]
    assert missing["gates"][0]["message"] == "missing from job cpu-1's results"
    assert doc["decision"] == "defer"
    assert doc["reasons"][0].startswith("missing from job cpu-1's results: 1 planned cell")
    # The cell that ran is judged as before.
    (ran,) = [c for c in doc["cells"] if c["cell_id"] == "sdpa.a@cpu"]
    assert ran["gates"][0]["verdict"] == "pass"


def test_a_plan_whose_jobs_all_reported_decides_as_before(tmp_path: Path) -> None:
    _job(tmp_path / "jobs", "cpu-1", [Cell(workload="sdpa", case="a")], 1)
    plan = _plan(tmp_path / "plan.json", {"cpu-1": ["sdpa.a@cpu"]})
    code, doc, stderr = _aggregate(tmp_path, "--plan", str(plan))
    assert (code, doc["decision"]) == (0, "adopt"), stderr


def test_no_job_reported_at_all_still_decides_and_names_the_pins(tmp_path: Path) -> None:
    (tmp_path / "jobs").mkdir()
    plan = _plan(tmp_path / "plan.json", {"cuda-1": ["sdpa.a@cuda"]})
    code, doc, stderr = _aggregate(
        tmp_path, "--plan", str(plan), "--jobs-result", "cancelled",
        "--pins", "torch==2.13.0", "torch==2.14.1",
    )  # fmt: skip
    assert doc["decision"] == "defer" and code != 0, stderr
    assert doc["candidate"]["torch"] == "torch==2.14.1"
    assert doc["reasons"][0].startswith("job cuda-1 did not report: the bench jobs ended cancelled")
    # Without a plan, no results is an error, as before.
    code, _, stderr = _aggregate(tmp_path)
    assert code == 2 and "holds no job results" in stderr


def test_results_of_a_job_outside_the_plan_are_not_judged(tmp_path: Path) -> None:
    crashed = Cell(workload="mlp", case="b", status="crashed", failure_mode="signal", message="x")
    _job(tmp_path / "jobs", "cpu-1", [Cell(workload="sdpa", case="a")], 1)
    _job(tmp_path / "jobs", "cpu-9", [crashed], 2)  # a stale artifact of another run
    plan = _plan(tmp_path / "plan.json", {"cpu-1": ["sdpa.a@cpu"]})
    _, doc, _ = _aggregate(tmp_path, "--plan", str(plan))
    assert doc["decision"] == "adopt"
    assert {c["cell_id"] for c in doc["cells"] if c["workload"] != "rollback"} == {"sdpa.a@cpu"}
    assert any("job cpu-9, which this run's plan does not hold" in r for r in doc["reasons"])


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ("{", "cannot read the plan"),
        ('{"include": []}', "$.include"),
        ('{"include": [{"job": "a", "backend": "cpu"}]}', "$.include[0].cells"),
        ('{"include": [{"job": "a", "backend": "cpu", "cells": "x@cpu"}, '
         '{"job": "a", "backend": "cpu", "cells": "y@cpu"}]}', "job names repeat"),
    ],
)  # fmt: skip
def test_a_bad_plan_names_the_file_and_field(tmp_path: Path, text: str, where: str) -> None:
    _job(tmp_path / "jobs", "cpu-1", [Cell(workload="sdpa", case="a")], 1)
    (tmp_path / "plan.json").write_text(text)
    code, _, stderr = _aggregate(tmp_path, "--plan", str(tmp_path / "plan.json"))
    assert code == 2 and str(tmp_path / "plan.json") in stderr and where in stderr, stderr
    assert not (tmp_path / "decision").exists()


def test_worst_of_nothing_is_an_error_and_nothing_judged_is_not_adopt() -> None:
    from suite.judge.policy import worst
    from suite.judge.rules import overall

    with pytest.raises(ValueError):
        worst([])
    decision, reasons = overall([], [])
    assert decision == "defer" and reasons[0] == "nothing was judged: no cell ran"


def test_jobs_that_ran_different_torch_pairs_are_named(tmp_path: Path) -> None:
    """Each backend ran its own pin-source's move: the decision names every job's pair, since
    its own baseline and candidate are the first job's."""
    from tests.synthetic import ENV

    _job(tmp_path / "jobs", "cpu-1", [Cell(workload="sdpa", case="a")], 1)
    _, doc, _ = _aggregate(tmp_path)
    assert not [r for r in doc["reasons"] if "different torch pairs" in r]  # one pair
    job = tmp_path / "jobs" / "torch-matrix-job~pr~rocm-1"
    moved = {**ENV, "torch": {**ENV["torch"], "version": "2.7.1+rocm6.4"}}
    make_run(job / "baseline", [Cell(workload="mlp", case="b")], run_id="20261201T100009Z-0000b9")
    make_run(job / "candidate", [Cell(workload="mlp", case="b")], run_id="20261201T110009Z-0000c9",
             env=moved)  # fmt: skip
    _, doc, _ = _aggregate(tmp_path)
    (said,) = [r for r in doc["reasons"] if "different torch pairs" in r]
    assert "cpu-1: 2.13.0+cpu -> 2.13.0+cpu" in said
    assert "rocm-1: 2.13.0+cpu -> 2.7.1+rocm6.4" in said
