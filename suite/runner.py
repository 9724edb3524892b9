"""The parent side of a run: plan, probe the environment, run each cell in a fresh worker,
and keep run.json current so that a killed run can be resumed without losing or repeating cells."""

from __future__ import annotations

import json
import math
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from suite import __version__
from suite.errors import EnvironmentProblem, InputError
from suite.forkclient import ForkServer, fork_launcher_enabled
from suite.launch import Launcher, Outcome, read_tail, run_process
from suite.matrix import Matrix, expand
from suite.progress import Progress
from suite.results import (
    cell_file,
    failure_result,
    new_run_id,
    read_result,
    read_run,
    record_wall_s,
    utc_now,
    write_result,
    write_run,
)
from suite.spec import CellSpec
from suite.validation import validate
from suite.workloads import Resolved

PROBE_TIMEOUT_S = 300.0
# Workers time what users' code would see: the allocator and threads keep torch's defaults
# (the peak-memory pass sets what it needs, after the timed samples).
WORKER_ENV = {"PYTHONUNBUFFERED": "1"}
FAILED_STATUSES = ("failed", "crashed", "timeout", "oom")


@dataclass
class RunOptions:
    out: Path
    interpreter: str = sys.executable
    resume: bool = False
    timeout_s: float | None = None
    memory_limit_bytes: int | None = None
    rounds: tuple[int, ...] = (0,)
    command: list[str] = field(default_factory=lambda: list(sys.argv))
    extra_env: dict[str, str] = field(default_factory=dict)
    progress: Progress | None = None
    run_id: str | None = None
    # Starts a worker: the local process launcher, or one that runs it inside a container.
    launcher: Launcher = run_process


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
    src = str(suite_import_root())
    env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH", "")) if p)
    return env


def suite_import_root() -> Path:
    """A folder holding only this suite, for the worker's PYTHONPATH.

    The worker must import this very suite even from an interpreter (a venv for the other torch
    pin) that lacks it. Putting the suite's parent folder on the path would also expose that
    folder's other packages, the parent interpreter's torch among them when it is site-packages.
    """
    package = Path(__file__).resolve().parent
    root = (
        Path(tempfile.gettempdir()) / f"torch-matrix-src-{os.getuid()}-{_short_hash(str(package))}"
    )
    link = root / "suite"
    if not link.is_symlink() or link.resolve() != package:
        root.mkdir(parents=True, exist_ok=True)
        tmp = root / f".suite.{os.getpid()}"
        tmp.unlink(missing_ok=True)
        tmp.symlink_to(package, target_is_directory=True)
        os.replace(tmp, link)
    return root


def _short_hash(text: str) -> str:
    import hashlib

    return hashlib.sha256(text.encode()).hexdigest()[:12]


def probe_environment(
    options: RunOptions, log_dir: Path, launcher: Launcher | None = None
) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="torch-matrix-probe-") as tmp:
        out = Path(tmp) / "env.json"
        outcome = (launcher or options.launcher)(
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
    round_no: int,
    options: RunOptions,
    outcome: Outcome,
    log: Path,
    started_at: str,
    memory_limit: int | None,
    path_of_result: Path,
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
    if spec.ranks > 1:
        died = _torchrun_deaths(read_tail(log, 20000))
        parts, raised, raised_mode = _rank_failures(path_of_result)
        # A rank killed by a signal is the cause; the others' errors are its echo.
        if raised in _PART_MODES and not outcome.timed_out and "(SIG" not in died:
            status, mode, message = raised, raised_mode or _PART_MODES[raised], parts
        else:
            message = "; ".join(m for m in (message, died, parts) if m)
    return failure_result(
        spec,
        run_id,
        round_no,
        status=status,
        mode=mode,
        message=message,
        started_at=started_at,
        wall_s=outcome.wall_s,
        exit_code=outcome.returncode,
        signal=outcome.signal_name,
        stderr=read_tail(log),
    )


_TORCHRUN_FAILURE = re.compile(
    r"rank\s*:\s*(\d+)[^\n]*\n\s*exitcode\s*:\s*(-?\d+)[^\n]*?(?:\((SIG[A-Z]+)\))?\s*$",
    re.MULTILINE,
)


def _torchrun_deaths(log_text: str) -> str:
    """Which ranks torchrun saw die, from its failure summary (rank : N / exitcode : -11)."""
    deaths = [
        f"rank {rank} died ({sig or f'exit code {code}'})"
        for rank, code, sig in _TORCHRUN_FAILURE.findall(log_text)
        if sig != "SIGTERM"  # ranks torchrun itself stopped after the first death
    ]
    return "; ".join(dict.fromkeys(deaths))


# A rank that raised says why in its part file; its status becomes the cell's.
_PART_MODES = {
    "failed": "exception",
    "unsupported": "unsupported",
    "oom": "oom",
    "skipped": "unavailable",
}


def _rank_failures(result: Path) -> tuple[str, str | None, str | None]:
    """What the ranks of a distributed cell said before it ended (their part files), and the
    status and failure mode the first rank that raised reported."""
    import json

    said = []
    status = mode = None
    for part in sorted(result.parent.glob(f".{result.name}.rank*.json")):
        try:
            data = json.loads(part.read_text("utf-8"))
        except (OSError, ValueError):
            continue
        finally:
            part.unlink(missing_ok=True)
        if data.get("status") != "ok":
            said.append(f"rank {data.get('rank')} {data.get('status')}: {data.get('failure')}")
            if status is None:
                status, mode = data.get("status"), data.get("mode")
    return "; ".join(said), status, mode


def default_memory_limit() -> int | None:
    from suite.envinfo import memory_total_bytes

    total = memory_total_bytes()
    return int(total * 0.9) if total else None


TORCHRUN_ARGS_VAR = "TORCH_MATRIX_TORCHRUN_ARGS"


def worker_argv(
    interpreter: str, spec: CellSpec, result: Path, run_id: str, round_no: int
) -> list[str]:
    """The worker's command line; a cell of several ranks starts under torchrun."""
    launch = [interpreter, "-m", "suite.worker"]
    if spec.ranks > 1:
        # Multi-node: rendezvous options (--nnodes, --rdzv-endpoint, ...) come from the
        # environment; one node alone uses --standalone, which picks a free local port.
        extra = shlex.split(os.environ.get(TORCHRUN_ARGS_VAR, "")) or ["--standalone"]
        launch = [
            interpreter, "-m", "torch.distributed.run", *extra,
            "--nproc-per-node", str(spec.ranks), "--max-restarts", "0",
            "-m", "suite.worker",
        ]  # fmt: skip
    return [
        *launch, "cell",
        "--spec", spec.to_json(),
        "--result", str(result),
        "--run-id", run_id,
        "--round", str(round_no),
        "--path", os.getcwd(),
    ]  # fmt: skip


def run_cell(
    spec: CellSpec,
    run_id: str,
    run_dir: Path,
    options: RunOptions,
    env: dict[str, str],
    round_no: int,
    launcher: Launcher | None = None,
) -> dict[str, Any]:
    path = cell_file(run_dir, spec.cell_id, round_no)
    path.unlink(missing_ok=True)
    log = run_dir / "logs" / (path.stem + ".log")
    timeout = options.timeout_s or spec.timeout_s
    # Address-space limits break GPU drivers' large reservations; they guard CPU cells only.
    memory_limit = options.memory_limit_bytes if spec.backend == "cpu" else None
    argv = worker_argv(options.interpreter, spec, path, run_id, round_no)
    started_at = utc_now()
    # A fresh inductor cache per cell: compile time is measured cold, and no cell warms another.
    cache = run_dir / ".inductor-cache" / path.stem
    shutil.rmtree(cache, ignore_errors=True)
    env = {**env, "TORCHINDUCTOR_CACHE_DIR": str(cache)}
    try:
        outcome = (launcher or options.launcher)(
            argv, log_path=log, timeout_s=timeout, env=env, memory_limit_bytes=memory_limit
        )
    finally:
        shutil.rmtree(cache, ignore_errors=True)
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
    doc = _record_for_outcome(
        spec, run_id, round_no, options, outcome, log, started_at, memory_limit, path
    )
    write_result(path, doc)
    return doc


class Run:
    """One run directory: its run.json kept current after every cell."""

    def __init__(
        self,
        matrix: Matrix,
        options: RunOptions,
        cells: Sequence[CellSpec],
        resolved: dict[str, Resolved],
        environment: dict[str, Any] | None = None,
        extra: dict[str, Any] | None = None,
    ) -> None:
        self.options = options
        self.dir = options.out
        self.path = self.dir / "run.json"
        existing: dict[str, Any] | None = None
        if self.path.exists():
            if not options.resume:
                raise InputError(
                    "already holds a run; pass --resume to finish it, or choose another --out",
                    file=str(self.path),
                )
            existing = read_run(self.path)
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise EnvironmentProblem(f"cannot create output directory {self.dir}: {exc}") from exc
        for stale in self.dir.glob("cells/.*.tmp"):
            stale.unlink(missing_ok=True)
        self.worker_env = worker_env(options)
        self.launcher: Launcher = options.launcher
        self._server: ForkServer | None = None
        if options.launcher is run_process and fork_launcher_enabled():
            # A worker forked from a pre-imported server costs a fork, not an interpreter
            # start and `import torch`: rounds become cheap, and each is still its own process.
            self._server = ForkServer(
                options.interpreter, self.worker_env, self.dir / "logs" / "forkserver.log"
            )
            self.launcher = self._server
        self.environment = environment or probe_environment(
            options, self.dir / "logs", self.launcher
        )
        self.torch_version = self.environment["torch"]["version"]
        self.run_id = existing["run_id"] if existing else (options.run_id or new_run_id())
        commit, dirty = suite_commit()
        resumed = [*existing.get("resumed_at", []), utc_now()] if existing else []
        self.doc: dict[str, Any] = {
            "kind": "torch-matrix/run",
            "schema_version": 1,
            "run_id": self.run_id,
            "status": "running",
            "started_at": existing["started_at"] if existing else utc_now(),
            "finished_at": None,
            "resumed_at": resumed,
            "command": options.command or ["torch-matrix"],
            "cwd": os.getcwd(),
            "suite": {"version": __version__, "commit": commit, "dirty": dirty},
            "matrix": matrix.evidence(),
            "profile": matrix.profile,
            "options": {
                "timeout_s": options.timeout_s,
                "memory_limit_bytes": options.memory_limit_bytes,
                "rounds": len(options.rounds),
            },
            "interpreter": options.interpreter,
            "environment": self.environment,
            "workloads": {
                ref: {"ref": ref, "module": r.module, "file": r.file, "sha256": r.sha256}
                for ref, r in resolved.items()
            },
            "cells": [
                {
                    "cell_id": c.cell_id,
                    "status": "pending",
                    "file": str(cell_file(self.dir, c.cell_id, r).relative_to(self.dir)),
                    "wall_s": None,
                    "round": r,
                }
                for r in options.rounds
                for c in cells
            ],
        }
        self.doc.update(extra or {})
        self._index = {(c["cell_id"], c["round"]): c for c in self.doc["cells"]}
        self._records: dict[tuple[str, int], dict[str, Any]] = {}
        write_run(self.path, self.doc)

    def reusable(self, spec: CellSpec, round_no: int) -> dict[str, Any] | None:
        """The valid record --resume would keep for this round, if any."""
        if not self.options.resume:
            return None
        return _reusable(cell_file(self.dir, spec.cell_id, round_no), spec, self.torch_version)

    def discard(self, spec: CellSpec, round_no: int) -> None:
        """Forget a round of a cell (its record file too), so that it runs again."""
        cell_file(self.dir, spec.cell_id, round_no).unlink(missing_ok=True)
        self._records.pop((spec.cell_id, round_no), None)

    def records(self, spec: CellSpec) -> list[dict[str, Any]]:
        """This run's records of the cell so far, in round order."""
        return [d for (cid, _), d in sorted(self._records.items()) if cid == spec.cell_id]

    def spent_s(self) -> float:
        """Worker wall time of the rounds so far, as the records state it."""
        return math.fsum(record_wall_s(d) for d in self._records.values())

    def _entry(self, spec: CellSpec, round_no: int) -> dict[str, Any]:
        key = (spec.cell_id, round_no)
        if key not in self._index:  # rounds added look by look
            entry = {
                "cell_id": spec.cell_id,
                "status": "pending",
                "file": str(cell_file(self.dir, spec.cell_id, round_no).relative_to(self.dir)),
                "wall_s": None,
                "round": round_no,
            }
            self.doc["cells"].append(entry)
            self._index[key] = entry
        entry_found: dict[str, Any] = self._index[key]
        return entry_found

    def _check_source(self, spec: CellSpec, doc: dict[str, Any], path: Path) -> dict[str, Any]:
        """A cell whose workload file is not the one this run recorded (edited mid-run, or not
        the file the container saw) ran other code: its record is a failure, not evidence.

        Files at other paths are not compared: a built-in runs from the image's own copy."""
        recorded = self.doc["workloads"].get(spec.ref) or {}
        ran = doc.get("source") or {}
        if not recorded.get("sha256") or ran.get("file") != recorded.get("file"):
            return doc
        if ran.get("sha256") == recorded["sha256"]:
            return doc
        failed = failure_result(
            spec,
            self.run_id,
            doc["round"],
            status="failed",
            mode="source-changed",
            message=(
                f"the workload file {ran['file']} ran with sha256 {str(ran.get('sha256'))[:12]}, "
                f"but this run recorded {recorded['sha256'][:12]} when it started; "
                "rerun with the file unchanged"
            ),
            started_at=doc["started_at"],
            wall_s=doc["wall_s"],
        )
        write_result(path, failed)
        return failed

    def execute(self, spec: CellSpec, round_no: int) -> tuple[dict[str, Any], bool]:
        """Run one cell (or keep its valid record when resuming); returns (record, reused)."""
        path = cell_file(self.dir, spec.cell_id, round_no)
        doc = self.reusable(spec, round_no)
        reused = doc is not None
        if doc is None:
            availability = self.environment["backends"].get(spec.backend, {})
            if not availability.get("available", False):
                reason = availability.get("reason") or "backend not available"
                doc = failure_result(
                    spec,
                    self.run_id,
                    round_no,
                    status="skipped",
                    mode="unavailable",
                    message=reason,
                    started_at=utc_now(),
                    wall_s=0.0,
                )
                write_result(path, doc)
            else:
                if self.options.progress is not None:
                    self.options.progress.starting(spec.cell_id)
                doc = run_cell(
                    spec,
                    self.run_id,
                    self.dir,
                    self.options,
                    self.worker_env,
                    round_no,
                    self.launcher,
                )
                doc = self._check_source(spec, doc, path)
        # The parent's view of the cell's wall time: process start and teardown included.
        harness = doc.get("harness") or {}
        self._entry(spec, round_no).update(
            status=doc["status"], wall_s=harness.get("parent_wall_s", doc["wall_s"])
        )
        self._records[(spec.cell_id, round_no)] = doc
        write_run(self.path, self.doc)
        return doc, reused

    def trace(self, spec: CellSpec, trace_dir: Path) -> Path | None:
        """Profile one more steady-state step of this cell; return its Chrome trace."""
        trace_dir.mkdir(parents=True, exist_ok=True)
        stem = f"{spec.cell_id}.{self.doc.get('side', 'run')}"
        trace = trace_dir / f"{stem}.trace.json"
        result = trace_dir / f"{stem}.result.json"
        argv = worker_argv(self.options.interpreter, spec, result, self.run_id, 0)
        argv += ["--trace", str(trace)]
        self.launcher(
            argv,
            log_path=trace_dir / f"{stem}.log",
            timeout_s=self.options.timeout_s or spec.timeout_s,
            env=self.worker_env,
        )
        return trace if trace.is_file() else None

    def finish(self, status: str = "complete") -> None:
        self.doc.update(status=status, finished_at=utc_now())
        write_run(self.path, self.doc)

    def close(self) -> None:
        """Stop this run's fork server; a later call starts a new one."""
        if self._server is not None:
            self._server.close()


def run_matrix(
    matrix: Matrix,
    options: RunOptions,
    *,
    cells: Sequence[CellSpec] | None = None,
    resolved: dict[str, Resolved] | None = None,
    environment: dict[str, Any] | None = None,
) -> RunSummary:
    if cells is None or resolved is None:
        cells, resolved = expand(matrix)
    run = Run(matrix, options, cells, resolved, environment)
    progress = options.progress or Progress(len(cells) * len(options.rounds), stream=None)
    statuses: dict[str, str] = {}
    try:
        for round_no in options.rounds:
            for spec in cells:
                doc, reused = run.execute(spec, round_no)
                statuses[spec.cell_id] = doc["status"]
                progress.finished(spec.cell_id, doc, reused=reused)
    except BaseException:
        run.finish("interrupted")
        raise
    finally:
        run.close()
    run.finish()
    progress.done()
    return RunSummary(run.run_id, run.dir, statuses)
