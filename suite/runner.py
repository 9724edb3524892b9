"""The parent side of a run: plan, probe the environment, run each cell in a fresh worker,
and keep run.json current so that a killed run can be resumed without losing or repeating cells."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from suite import __version__
from suite.errors import EnvironmentProblem, InputError
from suite.launch import Outcome, read_tail, run_process
from suite.matrix import Matrix, expand
from suite.progress import Progress
from suite.results import (
    cell_file,
    failure_result,
    new_run_id,
    read_result,
    read_run,
    utc_now,
    write_result,
    write_run,
)
from suite.spec import CellSpec
from suite.validation import validate
from suite.workloads import Resolved

PROBE_TIMEOUT_S = 300.0
# glibc otherwise raises its mmap threshold after the first large free, and freed tensors then
# stay in the heap: RSS would no longer show what a cell really holds.
WORKER_ENV = {"MALLOC_MMAP_THRESHOLD_": "131072", "PYTHONUNBUFFERED": "1"}
FAILED_STATUSES = ("failed", "crashed", "timeout", "oom")


@dataclass
class RunOptions:
    out: Path
    interpreter: str = sys.executable
    resume: bool = False
    timeout_s: float | None = None
    memory_limit_bytes: int | None = None
    round_no: int = 0
    command: list[str] = field(default_factory=lambda: list(sys.argv))
    extra_env: dict[str, str] = field(default_factory=dict)
    progress: Progress | None = None
    run_id: str | None = None


@dataclass
class RunSummary:
    run_id: str
    run_dir: Path
    statuses: dict[str, str]

    @property
    def failed(self) -> list[str]:
        return [c for c, s in self.statuses.items() if s in FAILED_STATUSES]


def suite_commit() -> tuple[str | None, bool | None]:
    here = Path(__file__).resolve().parent.parent
    try:
        commit = subprocess.run(
            ["git", "-C", str(here), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
        if commit.returncode != 0:
            return None, None
        dirty = subprocess.run(
            ["git", "-C", str(here), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
        return commit.stdout.strip(), bool(dirty.stdout.strip())
    except (OSError, subprocess.TimeoutExpired):
        return None, None


def worker_env(options: RunOptions) -> dict[str, str]:
    env = dict(os.environ)
    env.update(WORKER_ENV)
    env.update(options.extra_env)
    # The worker must import this very suite, even from an interpreter that lacks it installed.
    src = str(Path(__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH", "")) if p)
    return env


def probe_environment(options: RunOptions, log_dir: Path) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="torch-matrix-probe-") as tmp:
        out = Path(tmp) / "env.json"
        outcome = run_process(
            [options.interpreter, "-m", "suite.worker", "probe", "--out", str(out)],
            log_path=log_dir / "probe.log",
            timeout_s=PROBE_TIMEOUT_S,
            env=worker_env(options),
        )
        if outcome.returncode != 0 or not out.is_file():
            raise EnvironmentProblem(
                f"probing {options.interpreter} failed ({_describe(outcome)}); is torch installed "
                f"there? Log: {log_dir / 'probe.log'}\n{read_tail(log_dir / 'probe.log', 1500)}"
            )
        env: dict[str, Any] = json.loads(out.read_text("utf-8"))
    validate(env, "torch-matrix/environment", file=str(log_dir / "probe.log"))
    return env


def _describe(outcome: Outcome) -> str:
    if outcome.timed_out:
        return f"timed out after {outcome.wall_s:.0f}s"
    if outcome.signal_name:
        return f"killed by {outcome.signal_name}"
    return f"exit code {outcome.returncode}"


def _reusable(path: Path, spec: CellSpec, torch_version: str) -> dict[str, Any] | None:
    """An existing record that --resume may keep: valid, same spec, same torch."""
    if not path.is_file():
        return None
    try:
        doc = read_result(path)
    except InputError:
        return None
    if doc["spec_hash"] != spec.spec_hash:
        return None
    if doc["torch"] is not None and doc["torch"].get("version") != torch_version:
        return None
    return doc


def _record_for_outcome(
    spec: CellSpec,
    run_id: str,
    options: RunOptions,
    outcome: Outcome,
    log: Path,
    started_at: str,
    memory_limit: int | None,
) -> dict[str, Any]:
    timeout = options.timeout_s or spec.timeout_s
    if outcome.timed_out:
        status, mode, message = (
            "timeout",
            "timeout",
            f"no result within {timeout:g}s; worker killed",
        )
    elif (
        outcome.signal_name == "SIGKILL"
        and outcome.maxrss_bytes
        and memory_limit
        and outcome.maxrss_bytes >= 0.8 * memory_limit
    ):
        status, mode = "oom", "oom"
        message = (
            f"killed by SIGKILL at peak RSS {outcome.maxrss_bytes / 2**30:.2f} GiB "
            "(the kernel's out-of-memory killer)"
        )
    elif outcome.signal_name:
        status, mode, message = "crashed", "signal", f"worker killed by {outcome.signal_name}"
    elif outcome.returncode != 0:
        status, mode = "crashed", "exit-code"
        message = f"worker exited with code {outcome.returncode} and wrote no result"
    else:
        status, mode, message = "crashed", "no-result", "worker exited 0 but wrote no valid result"
    return failure_result(
        spec,
        run_id,
        options.round_no,
        status=status,
        mode=mode,
        message=message,
        started_at=started_at,
        wall_s=outcome.wall_s,
        exit_code=outcome.returncode,
        signal=outcome.signal_name,
        stderr=read_tail(log),
    )


def default_memory_limit() -> int | None:
    from suite.envinfo import memory_total_bytes

    total = memory_total_bytes()
    return int(total * 0.9) if total else None


def run_cell(
    spec: CellSpec, run_id: str, run_dir: Path, options: RunOptions, env: dict[str, str]
) -> dict[str, Any]:
    path = cell_file(run_dir, spec.cell_id, options.round_no)
    path.unlink(missing_ok=True)
    log = run_dir / "logs" / (path.stem + ".log")
    timeout = options.timeout_s or spec.timeout_s
    # Address-space limits break GPU drivers' large reservations; they guard CPU cells only.
    memory_limit = options.memory_limit_bytes if spec.backend == "cpu" else None
    argv = [
        options.interpreter,
        "-m",
        "suite.worker",
        "cell",
        "--spec",
        spec.to_json(),
        "--result",
        str(path),
        "--run-id",
        run_id,
        "--round",
        str(options.round_no),
        "--path",
        os.getcwd(),
    ]
    started_at = utc_now()
    outcome = run_process(
        argv, log_path=log, timeout_s=timeout, env=env, memory_limit_bytes=memory_limit
    )
    if outcome.returncode == 0 and not outcome.timed_out and path.is_file():
        try:
            doc = read_result(path)
        except InputError:
            doc = {"run_id": None}
        if doc["run_id"] == run_id:
            if doc.get("harness") is not None:
                doc["harness"]["parent_wall_s"] = outcome.wall_s
                write_result(path, doc)
            return doc
    doc = _record_for_outcome(spec, run_id, options, outcome, log, started_at, memory_limit)
    write_result(path, doc)
    return doc


def _skipped(spec: CellSpec, run_id: str, options: RunOptions, reason: str) -> dict[str, Any]:
    doc = failure_result(
        spec,
        run_id,
        options.round_no,
        status="skipped",
        mode="unavailable",
        message=reason,
        started_at=utc_now(),
        wall_s=0.0,
    )
    return doc


def run_matrix(
    matrix: Matrix,
    options: RunOptions,
    *,
    cells: Sequence[CellSpec] | None = None,
    resolved: dict[str, Resolved] | None = None,
    environment: dict[str, Any] | None = None,
    on_cell: Callable[[CellSpec, dict[str, Any]], None] | None = None,
) -> RunSummary:
    if cells is None or resolved is None:
        cells, resolved = expand(matrix)
    run_dir = options.out
    run_path = run_dir / "run.json"
    existing: dict[str, Any] | None = None
    if run_path.exists():
        if not options.resume:
            raise InputError(
                "already holds a run; pass --resume to finish it, or choose another --out",
                file=str(run_path),
            )
        existing = read_run(run_path)
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise EnvironmentProblem(f"cannot create output directory {run_dir}: {exc}") from exc
    for stale in run_dir.glob("cells/.*.tmp"):
        stale.unlink(missing_ok=True)
    env_record = environment or probe_environment(options, run_dir / "logs")
    torch_version = env_record["torch"]["version"]
    run_id = existing["run_id"] if existing else (options.run_id or new_run_id())
    commit, dirty = suite_commit()
    run_doc: dict[str, Any] = {
        "kind": "torch-matrix/run",
        "schema_version": 1,
        "run_id": run_id,
        "status": "running",
        "started_at": existing["started_at"] if existing else utc_now(),
        "finished_at": None,
        "resumed_at": [
            *(existing.get("resumed_at", []) if existing else []),
            *([utc_now()] if existing else []),
        ],
        "command": options.command or ["torch-matrix"],
        "cwd": os.getcwd(),
        "suite": {"version": __version__, "commit": commit, "dirty": dirty},
        "matrix": matrix.evidence(),
        "profile": matrix.profile,
        "options": {
            "timeout_s": options.timeout_s,
            "memory_limit_bytes": options.memory_limit_bytes,
            "round": options.round_no,
        },
        "interpreter": options.interpreter,
        "environment": env_record,
        "workloads": {
            ref: {"ref": ref, "module": r.module, "file": r.file, "sha256": r.sha256}
            for ref, r in resolved.items()
        },
        "cells": [
            {
                "cell_id": c.cell_id,
                "status": "pending",
                "file": str(cell_file(run_dir, c.cell_id, options.round_no).relative_to(run_dir)),
                "wall_s": None,
                "round": options.round_no,
            }
            for c in cells
        ],
    }
    index = {c["cell_id"]: c for c in run_doc["cells"]}
    write_run(run_path, run_doc)
    progress = options.progress or Progress(len(cells), stream=None)
    env = worker_env(options)
    statuses: dict[str, str] = {}
    try:
        for spec in cells:
            path = cell_file(run_dir, spec.cell_id, options.round_no)
            doc = _reusable(path, spec, torch_version) if options.resume else None
            reused = doc is not None
            if doc is None:
                availability = env_record["backends"].get(spec.backend, {})
                if not availability.get("available", False):
                    doc = _skipped(
                        spec, run_id, options, availability.get("reason") or "backend not available"
                    )
                    write_result(path, doc)
                else:
                    progress.starting(spec.cell_id)
                    doc = run_cell(spec, run_id, run_dir, options, env)
            statuses[spec.cell_id] = doc["status"]
            # The parent's view of the cell's wall time: process start and teardown included.
            wall = doc.get("harness", {}) or {}
            index[spec.cell_id].update(
                status=doc["status"], wall_s=wall.get("parent_wall_s", doc["wall_s"])
            )
            write_run(run_path, run_doc)
            progress.finished(spec.cell_id, doc, reused=reused)
            if on_cell is not None:
                on_cell(spec, doc)
    except BaseException:
        run_doc.update(status="interrupted", finished_at=utc_now())
        write_run(run_path, run_doc)
        raise
    run_doc.update(status="complete", finished_at=utc_now())
    write_run(run_path, run_doc)
    progress.done()
    return RunSummary(run_id, run_dir, statuses)
