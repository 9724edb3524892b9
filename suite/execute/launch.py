"""Starting worker processes: argv in, a log file and an exit outcome out, always bounded in time.

The parent blocks in wait4() on a helper thread (no polling) and kills the worker's whole
process group when the timeout passes. wait4() also yields the worker's peak RSS, which tells
a kernel OOM kill apart from other SIGKILLs.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import resource
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

_PR_SET_PDEATHSIG = 1
TERM_GRACE_S = 3.0


@dataclass(frozen=True)
class Step:
    """One process to run, and how: what every launcher takes."""

    argv: Sequence[str]
    log_path: Path  # stdout and stderr, together
    timeout_s: float
    env: Mapping[str, str] | None = None  # None: this process's environment
    cwd: Path | None = None
    memory_limit_bytes: int | None = None  # an address-space limit (CPU cells only)


class Launcher(Protocol):
    """Runs a step to completion or timeout. run_process is the local one."""

    def __call__(self, step: Step) -> ProcessExit: ...


@dataclass(frozen=True)
class ProcessExit:
    returncode: int | None  # None: did not exit before the timeout
    signal_name: str | None
    timed_out: bool
    wall_s: float
    maxrss_bytes: int | None
    pid: int | None = None  # the worker's, where a launcher knows it (a fork server's child)


def signal_name(returncode: int) -> str | None:
    if returncode >= 0:
        return None
    try:
        return signal.Signals(-returncode).name
    except ValueError:
        return f"signal {-returncode}"


def _preexec(memory_limit_bytes: int | None) -> None:
    # The worker dies with its parent, so a killed runner leaves no cell writing behind its back.
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        except OSError:
            pass
    if memory_limit_bytes is not None:
        resource.setrlimit(resource.RLIMIT_AS, (memory_limit_bytes, memory_limit_bytes))


def run_process(step: Step) -> ProcessExit:
    """Run the step's argv with stdout+stderr to its log; kill its process group after its
    timeout."""
    argv, log_path, timeout_s, env, memory_limit_bytes = (
        step.argv, step.log_path, step.timeout_s, step.env, step.memory_limit_bytes
    )  # fmt: skip
    log_path.parent.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=dict(env) if env is not None else None,
            cwd=step.cwd,
            start_new_session=True,
            preexec_fn=lambda: _preexec(memory_limit_bytes),
        )
        status: list[tuple[int, int, resource.struct_rusage]] = []
        waiter = threading.Thread(target=lambda: status.append(os.wait4(proc.pid, 0)), daemon=True)
        waiter.start()
        waiter.join(timeout_s)
        timed_out = waiter.is_alive()
        if timed_out:
            _kill_group(proc.pid, signal.SIGTERM)
            waiter.join(TERM_GRACE_S)
            if waiter.is_alive():
                _kill_group(proc.pid, signal.SIGKILL)
                waiter.join()
        else:
            _kill_group(proc.pid, signal.SIGKILL)  # stragglers the worker left behind
    wall = time.perf_counter() - start
    proc.returncode = 0  # reaped by wait4 above; stop Popen from waiting on it again
    _, raw_status, usage = status[0]
    code = os.waitstatus_to_exitcode(raw_status)
    maxrss = usage.ru_maxrss * (1 if sys.platform == "darwin" else 1024)
    return ProcessExit(
        returncode=None if timed_out else code,
        signal_name=None if timed_out else signal_name(code),
        timed_out=timed_out,
        wall_s=wall,
        maxrss_bytes=maxrss,
    )


def _kill_group(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


def read_tail(path: Path, limit: int = 4000) -> str:
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - limit))
            return fh.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
