"""Kill -> restart -> resume: the harness SIGKILLs rank 1 of the recovery workload's FSDP2
training, torchrun restarts the group, and training resumes from the last sharded DCP
checkpoint. The clean resume equals uninterrupted training on both pins; the two planted bugs
in the resume fail."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

from suite.core.spec import CellSpec
from suite.core.wire import DURABLE_VAR
from suite.worker import faults
from suite.workloads import Fault, resolve
from tests.helpers import cli

CLEAN = "recovery.kill_rank.none.d256.n1x2@cpu"
DROP = "recovery.kill_rank.drop_optimizer_state.d256.n1x2@cpu"
BEFORE = "recovery.kill_rank.resume_step_before.d256.n1x2@cpu"


def test_the_fault_is_the_harness_and_restarts_the_cell_once() -> None:
    workload = resolve("recovery").workload
    killing = {"fault": "kill_rank", "bug": "none"}
    assert workload.fault(killing, "smoke") == Fault(rank=1, step=5)
    assert workload.restarts(killing, "smoke") == 1
    assert workload.fault({"fault": "none", "bug": "none"}, "smoke") is None
    assert workload.restarts({"fault": "none", "bug": "none"}, "smoke") == 0
    assert workload.skip_reason({"fault": "none", "bug": "drop_optimizer_state"}) is not None
    spec = CellSpec("recovery", "recovery", (), "cpu", "smoke", ranks=2, distributed=True,
                    restarts=1)  # fmt: skip
    assert CellSpec.from_json(spec.to_json()).restarts == 1
    assert spec.spec_hash == CellSpec(**{**spec.__dict__, "restarts": 0}).spec_hash


def test_the_kill_happens_only_where_and_when_the_fault_says(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    killed: list[tuple[int, int]] = []
    monkeypatch.setattr(os, "kill", lambda pid, sig: killed.append((pid, sig)))
    fault = Fault(rank=1, step=5)
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "0")
    for rank, step in ((0, 5), (1, 4), (1, 6)):
        faults.kill_here(fault, rank, step, tmp_path)
    faults.kill_here(None, 1, 5, tmp_path)
    assert killed == [] and not (tmp_path / faults.KILLED_FILE).exists()
    faults.kill_here(fault, 1, 5, tmp_path)
    assert killed == [(os.getpid(), signal.SIGKILL)]
    assert faults.killed_at(tmp_path) is None  # the first attempt was not killed yet
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "1")
    faults.kill_here(fault, 1, 5, tmp_path)  # never again after the restart
    assert len(killed) == 1
    when = faults.killed_at(tmp_path)
    assert when is not None and when > 0
    monkeypatch.setenv(DURABLE_VAR, str(tmp_path))
    assert faults.durable_dir() == tmp_path


@pytest.mark.slow
@pytest.mark.skipif(
    os.environ.get("TORCH_MATRIX_AB_CANDIDATE") == "skip", reason="TORCH_MATRIX_AB_CANDIDATE=skip"
)
def test_a_killed_rank_resumes_exactly_on_both_pins_and_planted_resume_bugs_fail(
    tmp_path: Path,
) -> None:
    import torch

    if not torch.__version__.startswith("2.13.0"):
        pytest.skip(f"the baseline here is torch {torch.__version__}, not 2.13.0")
    matrix = tmp_path / "m.yaml"
    matrix.write_text(
        "version: 1\nbackends: [cpu]\nworkloads:\n  - workload: recovery\n"
        "    grid: {bug: [none, drop_optimizer_state, resume_step_before]}\n    timeout: 300\n"
    )
    out = tmp_path / "ab"
    code, stdout, err = cli(
        "ab", "--candidate", "torch==2.14.1", "--matrix", str(matrix), "--rounds", "1",
        "--no-traces", "--out", str(out), "--format", "json",
    )  # fmt: skip
    if code == 3 and "could not prepare an environment" in err:
        pytest.skip(f"torch 2.14.1 cannot be installed here: {err.splitlines()[-1]}")
    decision = json.loads(stdout)
    cells = {c["cell_id"]: c for c in decision["cells"]}
    clean = cells[CLEAN]
    assert (clean["baseline_status"], clean["candidate_status"]) == ("ok", "ok"), err
    for bug in (DROP, BEFORE):  # each planted bug fails its check on both pins
        assert (cells[bug]["baseline_status"], cells[bug]["candidate_status"]) == (
            "failed",
            "failed",
        )
    for side in ("baseline", "candidate"):
        for path in sorted((out / side / "cells").glob("recovery.kill_rank.*.json")):
            doc = json.loads(path.read_text())
            metrics = {k: v["value"] for k, v in doc["metrics"].items()}
            assert metrics["attempt"] == 1, path  # the group was restarted once
            assert metrics["recovery_s"] > 0 and metrics["steps_lost"] >= 2, path
            if path.name.startswith(CLEAN):
                assert doc["status"] == "ok", (path, doc["failure"])
                assert metrics["resume_max_abs_diff"] == 0.0
                assert metrics["final_param_max_abs_diff"] == 0.0
            else:
                failed = {c["label"] for c in doc["correctness"]["checks"] if not c["passed"]}
                assert failed == {"resumed_loss_curve", "final_parameters"}, path
    recovery = next(g for g in clean["gates"] if g["gate"] == "recovery")
    assert recovery["verdict"] != "not applicable", recovery
