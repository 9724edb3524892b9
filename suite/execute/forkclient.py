"""The parent side of the fork server: a Launcher that asks a pre-importing server
(suite.execute.forkserver) to fork each worker, and bounds, kills and reports it as
run_process would.

Whatever the server cannot start faithfully goes to run_process unchanged: another interpreter,
an argv that is not ``-m suite.worker`` (torchrun launches), and an environment that differs
from the server's in a variable read at import time.
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from suite.core.errors import EnvironmentProblem
from suite.execute.forkserver import Request, import_time_env
from suite.execute.launch import (
    TERM_GRACE_S,
    ProcessExit,
    Step,
    _preexec,
    read_tail,
    run_process,
    signal_name,
)

FORK_SERVER_VAR = "TORCH_MATRIX_FORK_SERVER"
WORKER_MODULE = "suite.worker"
READY_TIMEOUT_S = 300.0
# After SIGKILL a worker is gone within moments unless the kernel holds it (a driver call);
# past this the server, blocked in wait4(), is given up on and restarted.
KILL_WAIT_S = 60.0
CLOSE_WAIT_S = 10.0


def fork_launcher_enabled(environ: Mapping[str, str] | None = None) -> bool:
    """TORCH_MATRIX_FORK_SERVER=0 turns the fork server off; by default it serves on Linux,
    where a death signal ties every worker to it."""
    value = (os.environ if environ is None else environ).get(FORK_SERVER_VAR)
    if value is not None and value.strip():
        return value.strip() != "0"
    return sys.platform.startswith("linux")


class _ServerLost(Exception):
    """The server closed its pipe, wrote nonsense, or stopped answering."""


class _Replies:
    """The server's stdout as JSON lines, each read with a deadline: select(), no polling."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._buffer = b""
        self._selector = selectors.DefaultSelector()
        self._selector.register(fd, selectors.EVENT_READ)

    def read(self, deadline: float | None) -> dict[str, Any] | None:
        """The next reply, or None once time.monotonic() passes deadline."""
        while b"\n" not in self._buffer:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return None
            if not self._selector.select(left):
                continue  # the loop re-checks the deadline
            chunk = os.read(self._fd, 65536)
            if not chunk:
                raise _ServerLost("the server closed its output")
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        try:
            doc = json.loads(line)
        except ValueError:
            doc = None
        if not isinstance(doc, dict):
            raise _ServerLost(f"unreadable reply from the server: {line[:200]!r}")
        return doc

    def close(self) -> None:
        self._selector.close()


class _Server:
    """One running server process: its pipes and what it said when it became ready."""

    def __init__(self, proc: subprocess.Popen[bytes], replies: _Replies) -> None:
        assert proc.stdin is not None and proc.stdout is not None
        self.proc = proc
        self.replies = replies
        self._stdin = proc.stdin
        self._stdout = proc.stdout

    def send(self, request: Request) -> None:
        self._stdin.write(request.to_line())
        self._stdin.flush()

    def stop(self, grace_s: float) -> None:
        """EOF first, so the server leaves on its own; SIGKILL if it will not."""
        with contextlib.suppress(OSError):
            self._stdin.close()
        try:
            self.proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.replies.close()
        self._stdout.close()


def _kill_group(pid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        # No such group yet: the child was killed before its setsid(), or is already gone.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)
    except PermissionError:
        pass


def _note(log_path: Path, message: str) -> None:
    with contextlib.suppress(OSError), open(log_path, "a", encoding="utf-8") as log:
        log.write(f"\ntorch-matrix: {message}\n")


class ForkServer:
    """A Launcher that forks workers from a server started lazily under interpreter.

    env is the environment the server is started with (the workers' environment, PYTHONPATH
    included); a request sends what its environment changes against it, and the server applies
    that to its own start-up environment, so what the side's interpreter adds (a wrapper's
    exports) reaches every worker. Requests whose import-time variables differ start plainly.
    log_path receives the server's own stderr. One worker at a time; close() (or leaving a with
    block) ends the server.
    """

    def __init__(
        self,
        interpreter: str,
        env: Mapping[str, str],
        log_path: Path,
        *,
        ready_timeout_s: float = READY_TIMEOUT_S,
        prefix: Sequence[str] = (),
    ) -> None:
        self.interpreter = interpreter
        # What the server runs under (valgrind, for the counting processes): its forked
        # workers stay under it.
        self.prefix = tuple(prefix)
        self.env = dict(env)
        self.log_path = log_path
        self.ready_timeout_s = ready_timeout_s
        self._frozen = import_time_env(self.env)
        self._server: _Server | None = None
        self._lock = threading.RLock()

    @property
    def server_pid(self) -> int | None:
        return self._server.proc.pid if self._server is not None else None

    def __call__(self, step: Step) -> ProcessExit:
        request_env = dict(os.environ if step.env is None else step.env)
        rest = self._worker_args(step.argv)
        if rest is None or import_time_env(request_env) != self._frozen:
            return run_process(step)
        cwd = None if step.cwd is None else str(step.cwd)
        # Only what differs from the environment the server was started with: the server's own
        # start (the side's interpreter's, a wrapper's exports included) is the rest.
        changed = {k: v for k, v in request_env.items() if self.env.get(k) != v}
        unset = tuple(k for k in self.env if k not in request_env)
        request = Request(
            rest, str(step.log_path), changed, cwd, step.memory_limit_bytes, unset=unset
        )
        with self._lock:
            return self._fork(request, step.log_path, step.timeout_s)

    def _worker_args(self, argv: Sequence[str]) -> tuple[str, ...] | None:
        """argv after ``interpreter -m suite.worker``; None for any other command."""
        head = [self.interpreter, "-m", WORKER_MODULE]
        return tuple(argv[3:]) if list(argv[:3]) == head else None

    def _fork(self, request: Request, log_path: Path, timeout_s: float) -> ProcessExit:
        server = self._ensure_server()
        log_path.parent.mkdir(parents=True, exist_ok=True)
        log_path.write_bytes(b"")  # the worker appends; run_process starts the log afresh too
        start = time.perf_counter()
        deadline = time.monotonic() + timeout_s
        pid: int | None = None
        timed_out = False
        try:
            server.send(request)
            forked = server.replies.read(deadline)
            if forked is None:
                timed_out = True
                raise _ServerLost(f"no worker forked within {timeout_s:g}s")
            if "error" in forked:
                _note(log_path, f"the fork server started no worker: {forked['error']}")
                wall = time.perf_counter() - start
                return ProcessExit(
                    returncode=1, signal_name=None, timed_out=False, wall_s=wall, maxrss_bytes=None
                )
            pid = int(forked["pid"])
            done = server.replies.read(deadline)
            if done is None:
                timed_out = True
                _kill_group(pid, signal.SIGTERM)
                done = server.replies.read(time.monotonic() + TERM_GRACE_S)
            if done is None:
                _kill_group(pid, signal.SIGKILL)
                done = server.replies.read(time.monotonic() + KILL_WAIT_S)
            if done is None:
                raise _ServerLost(f"worker {pid} was not reaped {KILL_WAIT_S:g}s after SIGKILL")
            wall = time.perf_counter() - start
            _kill_group(pid, signal.SIGKILL)  # stragglers the worker left behind
            code = os.waitstatus_to_exitcode(int(done["status"]))
            return ProcessExit(
                returncode=None if timed_out else code,
                signal_name=None if timed_out else signal_name(code),
                timed_out=timed_out,
                wall_s=wall,
                maxrss_bytes=int(done["maxrss_bytes"]),
                pid=pid,
            )
        except (_ServerLost, OSError, KeyError, TypeError, ValueError) as exc:
            self._lose(pid)
            _note(
                log_path,
                f"the fork server for {self.interpreter} was lost during this worker ({exc}); "
                "the worker died with it, and the next one starts a new server",
            )
            return ProcessExit(
                returncode=None if timed_out else 1,
                signal_name=None,
                timed_out=timed_out,
                wall_s=time.perf_counter() - start,
                maxrss_bytes=None,
            )
        except BaseException:
            # Interrupted mid-request: the replies still due would answer the next request.
            self._lose(pid)
            raise

    def _lose(self, pid: int | None) -> None:
        if pid is not None:
            _kill_group(pid, signal.SIGKILL)
        server, self._server = self._server, None
        if server is not None:
            server.proc.kill()
            server.stop(CLOSE_WAIT_S)

    def _ensure_server(self) -> _Server:
        if self._server is not None and self._server.proc.poll() is None:
            return self._server
        if self._server is not None:
            self._lose(None)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        argv = [*self.prefix, self.interpreter, "-m", "suite.execute.forkserver"]
        try:
            with open(self.log_path, "ab") as log:
                proc = subprocess.Popen(
                    argv,
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=log,
                    env=self.env,
                    start_new_session=True,
                    preexec_fn=lambda: _preexec(None),
                )
        except OSError as exc:
            raise EnvironmentProblem(
                f"cannot start the fork server {' '.join(argv)}: {exc}; is the interpreter there?"
            ) from exc
        assert proc.stdout is not None
        server = _Server(proc, _Replies(proc.stdout.fileno()))
        try:
            ready = server.replies.read(time.monotonic() + self.ready_timeout_s)
            problem = None if ready and ready.get("ready") else "it did not report ready in time"
        except _ServerLost as exc:
            problem = str(exc)
        if problem is not None:
            proc.kill()
            server.stop(CLOSE_WAIT_S)
            raise EnvironmentProblem(
                f"the fork server under {self.interpreter} failed to start ({problem}; exit "
                f"status {proc.returncode}). Is torch installed there? Set {FORK_SERVER_VAR}=0 "
                f"to start every worker plainly. Log: {self.log_path}\n"
                f"{read_tail(self.log_path, 1500)}"
            )
        self._server = server
        return server

    def close(self) -> None:
        with self._lock:
            server, self._server = self._server, None
            if server is not None:
                server.stop(CLOSE_WAIT_S)

    def __enter__(self) -> ForkServer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
