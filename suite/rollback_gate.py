"""Runs the rollback checks of an A/B (see suite/rollback.py) and turns them into decision cells."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from suite.accuracy import tensor_drift
from suite.matrix import Matrix
from suite.policy import Gate, Policy
from suite.runner import Run, RunOptions
from suite.sides import Side, prepare
from suite.spec import CellSpec
from suite.verdicts import gate_result
from suite.workloads import Resolved

STEP_TIMEOUT_S = 900.0
DEFAULT_DRIFT_TOLERANCE = 1e-4
ROLLBACK_GATE = Gate("rollback", "hard", required=True)


def _cell(name: str, verdict: str, message: str, **numbers: Any) -> dict[str, Any]:
    gate = gate_result(ROLLBACK_GATE, verdict, message, **numbers)
    return {
        "cell_id": f"rollback.{name}@any", "row_id": "rollback@any", "workload": "rollback",
        "backend": "any", "lane": "production", "baseline_status": None, "candidate_status": None,
        "gates": [gate], "repro": None, "artifacts": {},
    }  # fmt: skip


def _run(side: Side, run: Run, args: list[str], log: Path) -> int | None:
    outcome = side.launcher(
        [side.interpreter, "-m", "suite.rollback", *args],
        log_path=log, timeout_s=STEP_TIMEOUT_S, env=run.worker_env,
    )  # fmt: skip
    return None if outcome.timed_out else outcome.returncode


def compatibility(
    sides: dict[str, tuple[Side, Run]], out: Path
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Checkpoints written by each pin, read by the other."""
    cells: list[dict[str, Any]] = []
    reports: dict[str, Any] = {}
    for writer, reader in (("candidate", "baseline"), ("baseline", "candidate")):
        direction = f"{writer}-to-{reader}"
        folder = out / "rollback" / f"written-by-{writer}"
        logs = out / "rollback" / "logs"
        code = _run(*sides[writer], ["write", "--into", str(folder)], logs / f"write-{writer}.log")
        report_path = out / "rollback" / f"{direction}.json"
        if code == 0:
            code = _run(
                *sides[reader],
                ["read", "--from", str(folder), "--report", str(report_path)],
                logs / f"read-{direction}.log",
            )
        if code != 0 or not report_path.is_file():
            step = "writing" if not (folder / "meta.json").is_file() else "reading"
            cells.append(
                _cell(
                    f"checkpoint.{direction}",
                    "fail",
                    f"{step} the checkpoint failed (exit {code}); see {logs}",
                )
            )
            continue
        report = json.loads(report_path.read_text("utf-8"))
        reports[direction] = report
        cells.extend(checkpoint_cells(direction, report))
    return cells, reports


def checkpoint_cells(direction: str, report: dict[str, Any]) -> list[dict[str, Any]]:
    """One rollback cell per checkpoint format from a reader's report."""
    cells = []
    for fmt, result in report["formats"].items():
        what = f"{fmt} written by torch {report['written_by']}, loaded by {report['torch']}"
        if result["ok"]:
            message = (
                f"{what}: training continues alike (max relative difference "
                f"{result['max_rel_diff']:.2g})"
            )
            cells.append(_cell(f"checkpoint.{fmt}.{direction}", "pass", message))
        else:
            cells.append(
                _cell(f"checkpoint.{fmt}.{direction}", "fail", f"{what}: {result['error']}")
            )
    return cells


def _drift(a: Path, b: Path) -> tuple[str, float]:
    import torch

    found = tensor_drift(torch.load(a, weights_only=True), torch.load(b, weights_only=True))
    return found.name, found.relative


def rehearsal(
    matrix: Matrix,
    cells: Sequence[CellSpec],
    resolved: dict[str, Resolved],
    baseline: Side,
    base_run: Run,
    policy: Policy,
    out: Path,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Back to the baseline: environment ready again, every cell once more, same results."""
    start = time.perf_counter()
    again = prepare(baseline.spec, "baseline")
    options = RunOptions(
        out=out / "rehearsal", interpreter=again.interpreter, timeout_s=base_run.options.timeout_s,
        memory_limit_bytes=base_run.options.memory_limit_bytes, rounds=(0,),
        command=base_run.options.command, launcher=again.launcher,
    )  # fmt: skip
    run = Run(matrix, options, cells, resolved, extra={"label": baseline.label, "side": "baseline"})
    ready_s = time.perf_counter() - start
    try:
        for spec in cells:
            run.execute(spec, 0)
    finally:
        run.close()
    run.finish()
    total = time.perf_counter() - start
    timing = {
        "environment_ready_s": ready_s + again.prepared_s,
        "rehearsal_s": total - ready_s,
        "duration_s": total + again.prepared_s,
    }
    return judge_rehearsal(cells, base_run.dir, run.dir, policy, timing), timing


def judge_rehearsal(
    cells: Sequence[CellSpec],
    base_dir: Path,
    rehearsal_dir: Path,
    policy: Policy,
    timing: dict[str, float],
) -> dict[str, Any]:
    """Did every cell reproduce its round-0 status and outputs (within the drift tolerance)?"""
    gate = policy.gates.get("drift")
    mismatches: list[str] = []
    for spec in cells:
        doc = json.loads((rehearsal_dir / "cells" / f"{spec.cell_id}.json").read_text("utf-8"))
        earlier = json.loads((base_dir / "cells" / f"{spec.cell_id}.json").read_text("utf-8"))
        if doc["status"] != earlier["status"]:
            mismatches.append(f"{spec.cell_id}: status {earlier['status']} then {doc['status']}")
            continue
        if doc.get("outputs") and earlier.get("outputs"):
            dtype = str(spec.params_dict.get("dtype", "fp32"))
            limits = (gate.relative_tolerance or {}) if gate else {}
            tolerance = limits.get(dtype) or DEFAULT_DRIFT_TOLERANCE
            name, rel = _drift(
                base_dir / earlier["outputs"]["file"], rehearsal_dir / doc["outputs"]["file"]
            )
            if rel > tolerance:
                mismatches.append(f"{spec.cell_id}: {name} differs by {rel:.3g} > {tolerance:g}")
    text = (
        f"back to the baseline in {timing['duration_s']:.0f}s (environment "
        f"{timing['environment_ready_s']:.0f}s, rehearsal of {len(cells)} cells "
        f"{timing['rehearsal_s']:.0f}s)"
    )
    numbers = {"candidate": timing["duration_s"], "unit": "s"}
    if not mismatches:
        return _cell(
            "rehearsal", "pass", f"{text}; every cell reproduced its earlier result", **numbers
        )
    more = f" (+{len(mismatches) - 5} more)" if len(mismatches) > 5 else ""
    return _cell(
        "rehearsal",
        "fail",
        f"{text}; the baseline does not reproduce itself: " + "; ".join(mismatches[:5]) + more,
        **numbers,
    )
