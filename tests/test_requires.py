"""A profile's `requires:` rows: no adopt or isolate without a cell of each that ran on both
sides on the fleet's backends the run covers."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from suite.judge.missing import required_rows
from suite.judge.policy import load_policy

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
