"""The fork server: imports torch and the worker once, then forks one fresh worker per request.

Run as ``python -m suite.execute.forkserver`` under a side's interpreter (the suite on
PYTHONPATH, as for the worker); suite.execute.forkclient drives it. A worker then costs a fork
instead of an interpreter start and ``import torch``, and is still a process of its own: its
crash, hang or OOM ends it alone, and it holds no torch state that another worker touched.

Protocol, one JSON object per line; one request at a time, EOF on stdin ends the server:
  server -> parent, once:  {"ready": true, "pid": P, "torch": V, "python": V, "threads": N}
  parent -> server:        {"argv": [...], "env": {...}, "unset": [...], "log": PATH,
                            "cwd": PATH | null, "memory_limit_bytes": N | null}
                            (argv after "-m suite.worker"; env and unset: what the parent adds,
                            changes or removes for this worker, against the server's start)
  server -> parent:        {"pid": C}                              right after the fork
  server -> parent:        {"pid": C, "status": RAW, "maxrss_bytes": B}   once wait4() reaps C
  or, in place of either:  {"error": MESSAGE}                      no worker was started

A worker's environment is the server's own start-up environment — what the side's interpreter gave
it, a wrapper script's exports included — with only the parent's own changes for the worker
applied on top, as a plainly started worker would see: the parent's environment passes through
the same interpreter, which adds its exports last.

Shared with every worker, copy-on-write: the loaded modules and libraries, and what those read
from the environment while loading (IMPORT_TIME_PREFIXES). Not shared: the server runs no torch
op, so no CUDA context, no caching allocator and no intra-op, inter-op or OpenMP thread exists
before the fork; each worker starts its own. The one thread the imports do start (torch 2.13's
CPU wheel) is OpenBLAS's, loaded with numpy, which torch imports; OpenBLAS stops it in its own
pthread_atfork handler, so the server forks with one thread and stays at one after its first
fork.
"""

from __future__ import annotations

import atexit
import importlib
import json
import os
import platform
import signal
import sys
import traceback
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, BinaryIO, NoReturn

# The same setup a plainly started worker gets: die with the parent, bounded address space.
from suite.execute.launch import _preexec

# Read once, when the interpreter starts or torch and its libraries load, so a forked worker
# keeps the server's values whatever its request says. Found with a getenv() tracer around
# `import torch, suite.worker.cell` (torch 2.13): on an MKL + OpenMP build even OMP_NUM_THREADS and
# MKL_NUM_THREADS are read at import (the OpenMP runtime and MKL size themselves when they load;
# torch's pool later asks them), so a request that changes them gets the server's thread count.
# A variable in doubt is listed: a wrong guess costs a plainly started worker, not a wrong one.
FORKED_VAR = "TORCH_MATRIX_FORKED"
IMPORT_TIME_PREFIXES = (
    "PYTHON",  # sys.path, hash seed, buffering, bytecode: fixed at interpreter start
    "LD_",  # the dynamic loader reads these once, at process start
    "MALLOC_",  # glibc's allocator tunables, read at its first use
    "GLIBC_TUNABLES",
    "LANG",
    "LC_",  # the locale and preferred encoding Python set up at start
    "OMP_",
    "GOMP_",
    "KMP_",  # OpenMP runtimes, initialised when libtorch loads
    "MKL",  # MKL_* and MKLDNN_*
    "ONEDNN_",
    "DNNL_",
    "OPENBLAS_",
    "GOTO_",
    "NPY_",
    "NUMPY_",
    "KINETO_",
    "TORCH_",  # TORCH_LOGS, TORCH_SHOW_CPP_STACKTRACES, compiler config read at import, ...
    "PYTORCH_",  # PYTORCH_JIT and kin; the allocator settings are kept here to be safe
    "TORCHDYNAMO_",
    "TORCHINDUCTOR_",  # inductor's config module reads its settings at import (preloaded)
    "FX_",
    "OPENSSL_",
)
IMPORT_TIME_NAMES = ("TORCHINDUCTOR_FORCE_DISABLE_CACHES",)  # torch.compiler.config, at import
# The suite's own settings, which the worker reads when it runs, not when it is imported.
RUNTIME_PREFIXES = ("TORCH_MATRIX_", "TORCHINDUCTOR_CACHE_DIR")  # cache dir: read per use
# What every worker needs before its timed region; suite.workloads is the registry alone (a
# built-in workload imports when a worker resolves it), and none of these runs a torch op.
# torch._dynamo is imported by the first optimizer or torch.compile (~2 s on a 2-core CPU);
# importing it starts no thread and no compile pool.
PRELOAD = (
    "suite.worker.cell",
    "suite.workloads",
    "torch.nn.functional",
    "torch.optim",
    "torch._dynamo",
)
# The environment the side's interpreter started the server with, before anything changed it.
START_ENV: dict[str, str] = dict(os.environ)
# ru_maxrss is in KiB on Linux and in bytes on macOS.
RSS_UNIT = 1 if sys.platform == "darwin" else 1024


def import_time_env(env: Mapping[str, str]) -> dict[str, str]:
    """The part of env that a forked worker cannot change: it must equal the server's."""
    return {
        k: v
        for k, v in env.items()
        if (k.startswith(IMPORT_TIME_PREFIXES) or k in IMPORT_TIME_NAMES)
        and not k.startswith(RUNTIME_PREFIXES)
    }


@dataclass(frozen=True)
class Request:
    """One worker to start: its argv after ``-m suite.worker`` and its process settings."""

    argv: tuple[str, ...]
    log: str
    env: Mapping[str, str] = field(default_factory=dict)  # set or changed against the start
    cwd: str | None = None
    memory_limit_bytes: int | None = None
    unset: tuple[str, ...] = ()  # removed against the start

    def to_line(self) -> bytes:
        doc = {
            "argv": list(self.argv),
            "env": dict(self.env),
            "unset": list(self.unset),
            "log": self.log,
            "cwd": self.cwd,
            "memory_limit_bytes": self.memory_limit_bytes,
        }
        return json.dumps(doc).encode() + b"\n"

    @classmethod
    def from_line(cls, line: bytes) -> Request:
        """Raises ValueError when the line is not a request."""
        doc = json.loads(line)
        if not isinstance(doc, dict):
            raise ValueError("a request is a JSON object")
        argv, env, log = doc.get("argv"), doc.get("env"), doc.get("log")
        cwd, limit = doc.get("cwd"), doc.get("memory_limit_bytes")
        if not (isinstance(argv, list) and all(isinstance(a, str) for a in argv)):
            raise ValueError("'argv' must be a list of strings")
        if not (isinstance(env, dict) and all(isinstance(v, str) for v in env.values())):
            raise ValueError("'env' must map names to strings")
        if not isinstance(log, str) or not (cwd is None or isinstance(cwd, str)):
            raise ValueError("'log' must be a path and 'cwd' a path or null")
        if not (limit is None or (isinstance(limit, int) and limit > 0)):
            raise ValueError("'memory_limit_bytes' must be a positive integer or null")
        unset = doc.get("unset", [])
        if not (isinstance(unset, list) and all(isinstance(u, str) for u in unset)):
            raise ValueError("'unset' must be a list of names")
        return cls(tuple(argv), log, env, cwd, limit, tuple(unset))


def _send(fd: int, doc: Mapping[str, Any]) -> None:
    data = json.dumps(doc).encode() + b"\n"
    while data:
        data = data[os.write(fd, data) :]


def _thread_count() -> int | None:
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:  # no procfs (macOS)
        return None


def _preload() -> dict[str, Any]:
    import torch

    for module in PRELOAD:
        importlib.import_module(module)
    if torch.cuda.is_initialized():  # a flag read; asking would itself start CUDA
        raise RuntimeError("importing torch initialised CUDA; a forked worker could not use it")
    return {
        "ready": True,
        "pid": os.getpid(),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "threads": _thread_count(),
    }


def _exit_code(exc: SystemExit) -> int:
    """What the interpreter would exit with for this SystemExit."""
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code
    print(exc.code, file=sys.stderr)
    return 1


def _redirect(log: str) -> None:
    """stdin from /dev/null, stdout and stderr appended to the cell's log, as run_process does."""
    sys.stdout.flush()
    sys.stderr.flush()
    null = os.open(os.devnull, os.O_RDONLY)
    out = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(null, 0)
    os.dup2(out, 1)
    os.dup2(out, 2)
    os.close(null)
    os.close(out)


def _run_worker(request: Request) -> int:
    from suite.worker import cell as worker

    # The whole environment, so that C code calling getenv() sees the request's values too: the
    # server's start-up environment (the side's interpreter's) and the parent's changes.
    env = {**START_ENV, **request.env}
    for name in request.unset:
        env.pop(name, None)
    os.environ.clear()
    os.environ.update(env)
    os.environ[FORKED_VAR] = "1"  # the worker's record says how it was started
    if request.cwd is not None:
        os.chdir(request.cwd)
    # The interpreter installs these at start; a worker gets them fresh, not the server's.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    # numpy seeded its global generator from the OS when the server imported it; every worker
    # would draw the same "random" numbers. A fresh interpreter would have drawn a fresh seed.
    numpy_random = sys.modules.get("numpy.random")
    if numpy_random is not None:
        numpy_random.seed()
    sys.argv = [worker.__file__ or "suite/worker/cell.py", *request.argv]
    try:
        return worker.main(list(request.argv))
    except SystemExit as exc:
        return _exit_code(exc)
    except BaseException:
        traceback.print_exc()
        return 1


def _become_worker(request: Request, server_pid: int, replies: int) -> NoReturn:
    code = 1
    try:
        os.close(replies)  # the protocol pipe is the server's alone
        os.setsid()  # a group of its own: the parent kills it and its children as one
        _preexec(request.memory_limit_bytes)
        if os.getppid() != server_pid:
            os._exit(1)  # the server died before the death signal was armed
        _redirect(request.log)
        code = _run_worker(request)
        # Interpreter shutdown would run these (logging, multiprocessing, compile pools).
        atexit._run_exitfuncs()
    except BaseException:
        traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def serve(requests: BinaryIO, replies: int) -> int:
    """Fork and reap one worker per request line until EOF."""
    server_pid = os.getpid()
    for line in iter(requests.readline, b""):
        try:
            request = Request.from_line(line)
        except ValueError as exc:
            _send(replies, {"error": f"bad request: {exc}"})
            continue
        # Anything still buffered would be written again by the child, into the cell's log.
        sys.stdout.flush()
        sys.stderr.flush()
        try:
            pid = os.fork()
        except OSError as exc:
            _send(replies, {"error": f"fork failed: {exc}"})
            continue
        if pid == 0:
            _become_worker(request, server_pid, replies)
        _send(replies, {"pid": pid})
        _, status, usage = os.wait4(pid, 0)
        _send(replies, {"pid": pid, "status": status, "maxrss_bytes": usage.ru_maxrss * RSS_UNIT})
    return 0


def main() -> int:
    _preexec(None)  # no server outlives the parent that started it
    # The protocol gets the real stdout; a stray print during the imports goes to the log.
    replies = os.dup(1)
    os.dup2(2, 1)
    try:
        ready = _preload()
    except BaseException:
        traceback.print_exc()
        return 1
    try:
        _send(replies, ready)
        return serve(sys.stdin.buffer, replies)
    except BrokenPipeError:  # the parent is gone; so is the reason to serve
        return 0


if __name__ == "__main__":
    sys.exit(main())
