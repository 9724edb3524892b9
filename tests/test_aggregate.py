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
