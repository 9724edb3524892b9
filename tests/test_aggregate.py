"""`aggregate` joins many CI jobs' A/B results into one decision, without act or a network."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers import cli
from tests.synthetic import Cell, make_run


def _job(root: Path, name: str, candidate: Cell, seed: int) -> None:
    job = root / f"torch-matrix-job-{name}"
    base = Cell(workload=candidate.workload, case=candidate.case)
    make_run(job / "baseline", [base], run_id=f"20261201T10000{seed}Z-0000b{seed}", seed=seed)
    make_run(job / "candidate", [candidate], run_id=f"20261201T11000{seed}Z-0000c{seed}", seed=seed)


def test_aggregate_joins_jobs_into_one_decision(tmp_path: Path) -> None:
    root = tmp_path / "jobs"
    _job(root, "0", Cell(workload="sdpa", case="a"), 1)
    crashed = Cell(
        workload="mlp", case="b", status="crashed", failure_mode="signal", message="SIGSEGV"
    )
    _job(root, "1", crashed, 2)
    out, summary = tmp_path / "decision", tmp_path / "summary.md"
    code, stdout, stderr = cli(
        "aggregate", str(root), "--out", str(out), "--note", "torch pin unknown: uv.lock",
        "--summary", str(summary), "--format", "json",
    )  # fmt: skip
    decision = json.loads((out / "decision.json").read_text())
    assert json.loads(stdout)["decision"] == decision["decision"] == "rollback"
    assert code == 6, stderr
    assert {c["cell_id"] for c in decision["cells"]} == {"sdpa.a@cpu", "mlp.b@cpu"}
    (bad,) = [c for c in decision["cells"] if c["candidate_status"] == "crashed"]
    assert any(g["verdict"] == "new-failure" for g in bad["gates"])
    assert "torch pin unknown: uv.lock" in decision["reasons"]
    assert {p.name for p in out.iterdir()} >= {"decision.json", "decision.md", "junit.xml"}
    assert summary.read_text() == (out / "decision.md").read_text()  # it fits: whole


def test_a_job_is_named_by_its_artifact_with_or_without_the_matrix_name() -> None:
    from suite.flows.aggregate import job_name

    assert job_name(Path("jobs/torch-matrix-job~pr-check~cpu-1")) == "cpu-1"
    assert job_name(Path("jobs/torch-matrix-job~nightly.v2~cuda-3")) == "cuda-3"
    assert job_name(Path("jobs/torch-matrix-job-cpu-1")) == "cpu-1"
    assert job_name(Path("jobs/results")) == "results"


def test_aggregate_of_a_folder_without_jobs_names_it(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    code, _, stderr = cli("aggregate", str(tmp_path / "empty"), "--out", str(tmp_path / "d"))
    assert code == 2 and f"{tmp_path / 'empty'}: holds no job results" in stderr


def test_github_step_writes_outputs_and_summary_and_exits_0_on_any_decision(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "jobs"
    crashed = Cell(workload="mlp", case="b", status="crashed", failure_mode="signal", message="x")
    _job(root, "0", crashed, 1)
    outputs, summary = tmp_path / "github_output", tmp_path / "step_summary.md"
    monkeypatch.setenv("GITHUB_OUTPUT", str(outputs))
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    out = tmp_path / "decision"
    code, _, stderr = cli("aggregate", str(root), "--out", str(out), "--github-step")
    assert code == 0, stderr  # a rollback decision, not a broken step
    assert f"decision=rollback\nresults-path={out}\n" == outputs.read_text()
    assert summary.read_text() == (out / "decision.md").read_text()
    # Errors keep their exit codes.
    code, _, _ = cli("aggregate", str(tmp_path / "none"), "--out", str(out), "--github-step")
    assert code == 2


def _rollback_evidence(job: Path, torch_save_diff: float | None) -> None:
    """What ab's rollback checks leave in a job folder: the steps' record, both readers'
    reports and a rehearsal that reproduced the baseline (a copy of its round 0)."""
    import shutil

    folder = job / "rollback"
    folder.mkdir(parents=True)
    timing = {"duration_s": 9.0, "environment_ready_s": 1.0, "rehearsal_s": 8.0}
    steps = {
        w: {"write_exit": 0, "read_exit": 0}
        for w in ("candidate-to-baseline", "baseline-to-candidate")
    }
    (folder / "record.json").write_text(json.dumps({"steps": steps, "timing": timing}))
    for way in steps:
        diff = torch_save_diff if way == "candidate-to-baseline" else 0.0
        formats = {
            # The reader's own `ok` says pass: the judge goes by the numbers, not by it.
            "torch_save": {"ok": True, "max_rel_diff": diff, "error": None},
            "dcp": {"ok": True, "max_rel_diff": 0.0, "error": None},
        }
        report = {"torch": "2.14.1", "written_by": "2.13.0", "formats": formats}
        (folder / f"{way}.json").write_text(json.dumps(report))
    shutil.copytree(job / "baseline", job / "rehearsal")
    # A stale decision of the job that says all passed must not be copied.
    (job / "decision.json").write_text("{}")


@pytest.mark.parametrize(("diff", "verdict"), [(0.0, "pass"), (0.5, "fail"), (None, "fail")])
def test_aggregate_judges_rollback_again_from_the_jobs_reports(
    tmp_path: Path, diff: float | None, verdict: str
) -> None:
    root = tmp_path / "jobs"
    _job(root, "0", Cell(workload="sdpa", case="a"), 1)
    _rollback_evidence(root / "torch-matrix-job-0", diff)
    out = tmp_path / "decision"
    code, _, stderr = cli("aggregate", str(root), "--out", str(out), "--format", "json")
    decision = json.loads((out / "decision.json").read_text())
    gates = {
        c["cell_id"]: c["gates"][0]["verdict"]
        for c in decision["cells"]
        if c["workload"] == "rollback"
    }
    assert gates == {
        "rollback.checkpoint.torch_save.candidate-to-baseline@0": verdict,
        "rollback.checkpoint.dcp.candidate-to-baseline@0": "pass",
        "rollback.checkpoint.torch_save.baseline-to-candidate@0": "pass",
        "rollback.checkpoint.dcp.baseline-to-candidate@0": "pass",
        "rollback.rehearsal@0": "pass",
    }, stderr
    assert decision["rollback"]["jobs"]["0"]["duration_s"] == 9.0
    assert (code == 0) == (verdict == "pass"), stderr


def test_aggregate_judges_a_rehearsal_that_lost_a_cell(tmp_path: Path) -> None:
    root = tmp_path / "jobs"
    _job(root, "0", Cell(workload="sdpa", case="a"), 1)
    job = root / "torch-matrix-job-0"
    _rollback_evidence(job, 0.0)
    for record in (job / "rehearsal" / "cells").glob("*.json"):
        record.unlink()
    out = tmp_path / "decision"
    cli("aggregate", str(root), "--out", str(out))
    decision = json.loads((out / "decision.json").read_text())
    (rehearsal,) = [c for c in decision["cells"] if c["cell_id"] == "rollback.rehearsal@0"]
    assert rehearsal["gates"][0]["verdict"] == "fail"
    assert "sdpa.a@cpu: no rehearsal record" in rehearsal["gates"][0]["message"]


def test_aggregate_says_not_comparable_from_the_recorded_differences(tmp_path: Path) -> None:
    root = tmp_path / "jobs"
    _job(root, "0", Cell(workload="sdpa", case="a"), 1)
    run = root / "torch-matrix-job-0" / "candidate" / "run.json"
    doc = json.loads(run.read_text())
    doc["environment"]["cpu"]["model"] = "another CPU"
    run.write_text(json.dumps(doc))
    out = tmp_path / "decision"
    cli("aggregate", str(root), "--out", str(out))
    decision = json.loads((out / "decision.json").read_text())
    assert decision["comparable"]["ok"] is False
    assert [r for r in decision["reasons"] if r.startswith("not comparable")] == [
        "not comparable: "
        + ", ".join(dict.fromkeys(d["field"] for d in decision["comparable"]["differences"]))
        + " differ"
    ]
