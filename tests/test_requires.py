"""A profile's `requires:` rows: no adopt or isolate without a cell of each that ran on both
sides on the fleet's backends the run covers."""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from suite.judge.missing import required_rows
from suite.judge.policy import load_policy
from tests.helpers import cli

POLICY = Path(__file__).resolve().parent.parent / "suite" / "data" / "default-policy.yaml"


def _policy(fleet: tuple[str, ...] = ("cuda",)) -> Any:
    policy = load_policy(POLICY, "distributed-finetune")
    return dataclasses.replace(policy, fleet_backends=fleet)


def _cell(workload: str, backend: str = "cpu", base: str = "ok", cand: str = "ok") -> Any:
    return {"cell_id": f"{workload}.n1x2@{backend}", "row_id": f"{workload}@{backend}",
            "workload": workload, "backend": backend, "lane": "production",
            "baseline_status": base, "candidate_status": cand, "gates": [], "repro": None,
            "artifacts": {}}  # fmt: skip


def test_the_distributed_finetune_profile_requires_fsdp2_checkpoint_and_recovery() -> None:
    assert _policy().requires == ("fsdp2", "checkpoint", "recovery")


def test_every_required_row_that_ran_on_both_sides_is_evidence() -> None:
    cells = [_cell("fsdp2"), _cell("checkpoint", cand="failed"), _cell("recovery", base="crashed")]
    assert required_rows(_policy(), cells) == []


def test_a_row_absent_or_skipped_is_named_with_what_its_cells_did() -> None:
    cells = [_cell("mlp_train"), _cell("fsdp2", base="skipped", cand="skipped"),
             _cell("checkpoint", cand=None)]  # fmt: skip
    (line,) = required_rows(_policy(), cells)
    assert line.startswith("required rows without evidence")
    assert "fsdp2 on cpu (its cells ran as skipped/skipped)" in line
    assert "checkpoint on cpu (its cells ran as ok/None)" in line
    assert "recovery on cpu (no cell of it ran)" in line


def test_a_fleet_backend_the_run_covers_needs_its_own_evidence() -> None:
    cells = [_cell(w) for w in ("fsdp2", "checkpoint", "recovery")] + [_cell("mlp", "cuda")]
    (line,) = required_rows(_policy(("cuda", "cpu")), cells)
    assert "fsdp2 on cuda" in line and "recovery on cuda" in line and "on cpu" not in line
    # A run on none of the fleet's backends is judged on the backends it covers.
    assert required_rows(_policy(("rocm",)), cells[:3]) == []


def test_patterns_match_the_workload_or_the_row() -> None:
    policy = dataclasses.replace(_policy(), requires=("fsdp*", "checkpoint@cpu"))
    assert required_rows(policy, [_cell("fsdp2"), _cell("checkpoint")]) == []
    assert required_rows(policy, [_cell("fsdp2"), _cell("checkpoint", "cuda")]) != []


@pytest.mark.slow
def test_the_built_in_matrix_without_its_distributed_rows_defers_and_with_them_judges_them(
    tmp_path: Path,
) -> None:
    """`ab` on the built-in matrix under the distributed-finetune profile (A/A, one round)."""
    ab = ("ab", "--baseline", sys.executable, "--candidate", "current", "--backend", "cpu",
          "--profile", "distributed-finetune", "--rounds", "1", "--format", "json")  # fmt: skip
    code, stdout, err = cli(*ab, "--workload", "mlp_train", "--out", str(tmp_path / "without"))
    decision = json.loads(stdout)
    assert (code, decision["decision"]) == (5, "defer"), err
    first = decision["reasons"][0]
    assert first.startswith("required rows without evidence"), decision["reasons"]
    for row in ("fsdp2 on cpu", "checkpoint on cpu", "recovery on cpu"):
        assert row in first

    distributed = ("fsdp2", "checkpoint", "recovery")
    chosen = [arg for w in ("mlp_train", *distributed) for arg in ("--workload", w)]
    code, stdout, err = cli(*ab, *chosen, "--out", str(tmp_path / "with"))
    decision = json.loads(stdout)
    assert not [r for r in decision["reasons"] if r.startswith("required rows without")], err
    ran = {
        c["workload"]
        for c in decision["cells"]
        if (c["baseline_status"], c["candidate_status"]) == ("ok", "ok")
    }
    assert set(distributed) <= ran, decision["cells"]
    for cell in decision["cells"]:
        if cell["workload"] in distributed:
            verdicts = {g["gate"]: g["verdict"] for g in cell["gates"]}
            assert verdicts["status"] == "pass" and verdicts["correctness"] == "pass", cell


def test_a_backend_absent_here_and_the_rollback_rows_cover_nothing() -> None:
    cells = [_cell(w) for w in ("fsdp2", "checkpoint", "recovery")]
    absent = [_cell(w, "cuda", "skipped", "skipped") for w in ("fsdp2", "checkpoint", "recovery")]
    rollback = {**_cell("rollback"), "backend": "any", "baseline_status": None}
    assert required_rows(_policy(("cuda",)), [*cells, *absent, rollback]) == []
    (line,) = required_rows(_policy(("cuda",)), [*cells[:2], *absent, rollback])
    assert "recovery on cpu (no cell of it ran)" in line and "on any" not in line
