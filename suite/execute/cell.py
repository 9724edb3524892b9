"""One cell in one worker: its command line (torchrun for several ranks), and the record written
for it when the worker leaves none (timeout, out of memory, a signal, an exit code, a rank that
died)."""

from __future__ import annotations

import shutil
from pathlib import Path

from suite.core.backends import backend_entry
from suite.core.errors import InputError
from suite.core.records import FailureMode, Result, Status
from suite.core.results import (
    cell_file,
    failure_result,
    read_result,
    utc_now,
    write_result,
)
from suite.core.spec import CellSpec
from suite.core.wire import DURABLE_VAR
from suite.execute.environment import RunOptions
from suite.execute.forensics import forensic_env, hang_in, hang_text
from suite.execute.launch import Launcher, ProcessExit, Step, read_tail, run_process
from suite.execute.outcome import (
    LOG_READ_LIMIT,
    rank_failures,
    rank_outcome,
    torchrun_deaths,
    worker_call,
)


def _record_for_outcome(
    spec: CellSpec,
    run_id: str,
    round_no: int,
    options: RunOptions,
    outcome: ProcessExit,
    log: Path,
    started_at: str,
    memory_limit: int | None,
) -> Result:
    timeout = options.timeout_s or spec.timeout_s
    status: Status
    mode: FailureMode
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
    hang = None
    if spec.world_size > 1:
        text = read_tail(log, LOG_READ_LIMIT)
        died = torchrun_deaths(text)
        parts, raised, raised_mode = rank_failures([text], run_id)
        # A rank killed by a signal is the cause; the others' errors are its echo.
        said = rank_outcome(parts, raised, raised_mode)
        if said is not None and not outcome.timed_out and "(SIG" not in died:
            (status, mode), message = said, parts
        else:
            if outcome.timed_out:  # what each rank said of itself before the stop
                stem = log.name.removesuffix(".log")
                hang = hang_in([text], run_id, spec.world_size, log.parent.parent, stem)
            message = "; ".join(m for m in (message, hang_text(hang), died, parts) if m)
    doc = failure_result(
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
    if hang is not None:
        doc["hang"] = hang
    return doc


def worker_argv(
    interpreter: str, spec: CellSpec, result: Path, run_id: str, round_no: int
) -> list[str]:
    """The worker's command line; a cell of several ranks on this one host starts under
    torchrun --standalone, which picks a free local port (several nodes: suite/execute/
    multinode.py)."""
    launch = [interpreter, "-m", "suite.worker"]
    if spec.world_size > 1 or spec.distributed:  # a world of one rank is still a world
        launch = [
            interpreter, "-m", "torch.distributed.run", "--standalone",
            "--nproc-per-node", str(spec.ranks), "--max-restarts", str(spec.restarts),
            "-m", "suite.worker",
        ]  # fmt: skip
    return [*launch, *worker_call(spec, result, run_id, round_no)]


def run_cell(
    spec: CellSpec,
    run_id: str,
    run_dir: Path,
    options: RunOptions,
    env: dict[str, str],
    round_no: int,
    launcher: Launcher | None = None,
) -> Result:
    nodes = options.nodes
    if spec.world_size > 1 and (spec.nodes > 1 or (nodes is not None and not nodes.plain)):
        from suite.execute.launchers import node_launcher
        from suite.execute.multinode import run_on_nodes, unplaceable

        placer = nodes or node_launcher(None, {})
        image = None
        if options.launcher is not run_process:
            image = getattr(options.launcher, "digest", None)
            if not (image and placer.runs_images):
                return unplaceable(spec, run_id, run_dir, round_no)
        return run_on_nodes(spec, run_id, run_dir, options, env, round_no, placer, image)
    path = cell_file(run_dir, spec.cell_id, round_no)
    path.unlink(missing_ok=True)
    log = run_dir / "logs" / (path.stem + ".log")
    timeout = options.timeout_s or spec.timeout_s
    # Address-space limits break GPU drivers' large reservations; they guard host cells only.
    memory_limit = options.memory_limit_bytes if backend_entry(spec.backend).host else None
    argv = worker_argv(options.interpreter, spec, path, run_id, round_no)
    started_at = utc_now()
    # A fresh inductor cache per cell: compile time is measured cold, and no cell warms another.
    cache = run_dir / ".inductor-cache" / path.stem
    # What the cell keeps across its group's restarts (a resumed run's checkpoints), no more.
    durable = run_dir / ".durable" / path.stem
    for folder in (cache, durable):
        shutil.rmtree(folder, ignore_errors=True)
    env = {**env, "TORCHINDUCTOR_CACHE_DIR": str(cache), DURABLE_VAR: str(durable)}
    if spec.world_size > 1 or spec.distributed:
        env.update(forensic_env(spec, run_dir, path.stem, timeout))
    try:
        outcome = (launcher or options.launcher)(
            Step(argv, log_path=log, timeout_s=timeout, env=env, memory_limit_bytes=memory_limit)
        )
    finally:
        for folder in (cache, durable):
            shutil.rmtree(folder, ignore_errors=True)
    if outcome.returncode == 0 and not outcome.timed_out and path.is_file():
        try:
            written: Result | None = read_result(path)
        except InputError:
            written = None
        if written is not None and written["run_id"] == run_id:
            if (harness := written.get("harness")) is not None:
                harness["parent_wall_s"] = outcome.wall_s
                write_result(path, written)
            return written
    doc = _record_for_outcome(
        spec, run_id, round_no, options, outcome, log, started_at, memory_limit
    )
    write_result(path, doc)
    return doc
