"""Runs the rollback checks of an A/B: each pin's checkpoint read by the other (the halves of
suite/worker/rollback.py, in each side's interpreter or container) and the rehearsal (the
baseline's cells once more). What they leave on disk is judged by suite/judge/rollback.py."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from suite.core.results import atomic_write_json
from suite.core.spec import CellSpec
from suite.execute.environment import RunOptions
from suite.execute.launch import Step
from suite.execute.prepared import PreparedSide
from suite.execute.runner import Run
from suite.execute.sides import prepare
from suite.judge.rollback import DIRECTIONS, RECORD, direction
from suite.workloads import Resolved
from suite.workloads.matrix import Matrix

STEP_TIMEOUT_S = 900.0


def _step(side: PreparedSide, run: Run, args: list[str], log: Path) -> int | None:
    """One half in the side's interpreter: its exit code, None when it timed out."""
    outcome = side.launcher(
        Step([side.interpreter, "-m", "suite.worker.rollback", *args],
        log_path=log, timeout_s=STEP_TIMEOUT_S, env=run.worker_env),
    )  # fmt: skip
    return None if outcome.timed_out else outcome.returncode


def compatibility(
    sides: dict[str, tuple[PreparedSide, Run]], out: Path, sharded: bool = False
) -> dict[str, dict[str, Any]]:
    """Checkpoints written by each pin, read by the other: how each step ended, per direction.
    The readers' reports land in out/rollback/DIRECTION.json. sharded: FSDP2's sharded DCP
    checkpoints too (two processes each way), for a matrix that runs distributed cells."""
    steps: dict[str, dict[str, Any]] = {}
    logs = out / "rollback" / "logs"
    for writer, reader in DIRECTIONS:
        way = direction(writer, reader)
        folder = out / "rollback" / f"written-by-{writer}"
        more = ["--sharded"] if sharded else []
        args = ["write", "--into", str(folder), *more]
        wrote = _step(*sides[writer], args, logs / f"write-{writer}.log")
        read = None
        if wrote == 0:
            report = out / "rollback" / f"{way}.json"
            args = ["read", "--from", str(folder), "--report", str(report), *more]
            read = _step(*sides[reader], args, logs / f"read-{way}.log")
        steps[way] = {"write_exit": wrote, "read_exit": read}
    return steps


def rehearsal(
    matrix: Matrix,
    cells: Sequence[CellSpec],
    resolved: dict[str, Resolved],
    baseline: PreparedSide,
    base_run: Run,
    out: Path,
) -> dict[str, float]:
    """Back to the baseline: environment ready again, every cell once more into out/rehearsal.
    Returns what that took."""
    start = time.perf_counter()
    again = prepare(
        baseline.spec, "baseline", indexes=baseline.indexes,
        with_requirements=baseline.with_requirements, pins=baseline.pins,
    )  # fmt: skip
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
    return {
        "environment_ready_s": ready_s + again.prepared_s,
        "rehearsal_s": total - ready_s,
        "duration_s": total + again.prepared_s,
    }


def run_checks(
    matrix: Matrix,
    cells: Sequence[CellSpec],
    resolved: dict[str, Resolved],
    sides: dict[str, tuple[PreparedSide, Run]],
    out: Path,
) -> None:
    """Both checks, and out/rollback/record.json saying how they went."""
    steps = compatibility(sides, out, sharded=any(c.distributed for c in cells))
    baseline, base_run = sides["baseline"]
    timing = rehearsal(matrix, cells, resolved, baseline, base_run, out)
    atomic_write_json(out / RECORD, {"steps": steps, "timing": timing})
