"""Counting a cell's step in instructions, inside a worker that runs under Valgrind's callgrind
(or, where the parent chose it, with the CPU's own counter: suite/worker/hw_counter.py).

The parent (suite/execute/counting.py) starts the worker as `valgrind --tool=callgrind
--instr-atstart=no --collect-atstart=no … python -m suite.worker cell …` with COUNT_VAR set to
the number of steps to count. Then ctx.measure() does not time: it makes the same cold call and
WARMUP_CALLS warm-up calls as every counted process, starts callgrind's instrumentation and
collection (client requests), runs the step that many times, and stops both. Uninstrumented,
Valgrind runs the import, the setup and the warm-up several times faster than instrumented: most
of a count's cost was there, not in the counted steps. The count is the instructions those steps
executed on this thread: deterministic to well under 0.1% for a fixed build and input, where a
clock on a shared 2-vCPU runner spreads 10-20% process to process.

It counts the kernels Valgrind's CPU emulation selects (torch reports AVX2 under Valgrind where
the host has AVX-512), on one thread; cache misses, memory bandwidth, frequency and thread
scaling are outside it (README, the instructions gate).
"""

from __future__ import annotations

import ctypes
import mmap
import os
import platform
import time
from collections.abc import Callable
from typing import Any

from suite.worker.hw_counter import ThreadInstructions

COUNT_VAR = "TORCH_MATRIX_COUNT_STEPS"
# What counts: "callgrind" (the worker runs under Valgrind) or "perf" (the CPU's own counter,
# suite/worker/hw_counter.py, at native speed); the parent picks (suite/execute/counting.py).
COUNT_WITH_VAR = "TORCH_MATRIX_COUNT_WITH"
METHODS = ("callgrind", "perf")
# Warm-up calls outside the count, after the cold one: under Valgrind a call costs ~50x what
# it does on the CPU, and the count of the call after them is already the steady one.
WARMUP_CALLS = 1
# Valgrind's client requests (valgrind.h, callgrind.h): a request is the magic preamble
# `rol $3/$13/$61/$51, %rdi` then `xchg %rbx,%rbx`, with %rax pointing at the request and its five
# arguments and %rdx holding the default answer, which stays when not under Valgrind.
_RUNNING_ON_VALGRIND = 0x1001
_TOGGLE_COLLECT = 0x43540002
_START_INSTRUMENTATION = 0x43540004
_STOP_INSTRUMENTATION = 0x43540005
_X86_64_REQUEST = bytes.fromhex(
    "4889f8"  # mov %rdi,%rax: the request block
    "31d2"  # xor %edx,%edx: the default answer, 0
    "48c1c703" "48c1c70d" "48c1c73d" "48c1c733"  # the preamble
    "4887db"  # xchg %rbx,%rbx: the request
    "4889d0"  # mov %rdx,%rax: the answer
    "c3"  # ret
)  # fmt: skip


class ClientRequests:
    """Valgrind client requests made from Python: a few bytes of x86-64 machine code in an
    executable page, called through ctypes. Torch's own toggle covers collection only; starting
    the instrumentation late is what makes the uninstrumented import and warm-up fast."""

    def __init__(self) -> None:
        if platform.machine() not in ("x86_64", "AMD64"):
            raise RuntimeError(f"no client requests for {platform.machine()} here")
        self._page = mmap.mmap(
            -1, mmap.PAGESIZE, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC
        )
        self._page.write(_X86_64_REQUEST)
        address = ctypes.addressof(ctypes.c_char.from_buffer(self._page))
        self._call = ctypes.CFUNCTYPE(ctypes.c_uint64, ctypes.c_void_p)(address)

    def request(self, code: int, *args: int) -> int:
        block = (ctypes.c_uint64 * 6)(code, *args, *[0] * (5 - len(args)))
        return int(self._call(ctypes.addressof(block)))

    def running_on_valgrind(self) -> bool:
        return self.request(_RUNNING_ON_VALGRIND) > 0

    def start(self) -> None:
        self.request(_START_INSTRUMENTATION)
        self.request(_TOGGLE_COLLECT)

    def stop(self) -> None:
        self.request(_TOGGLE_COLLECT)
        self.request(_STOP_INSTRUMENTATION)


def late_instrumentation() -> bool:
    """Whether counting workers here can start instrumentation themselves (the parent then
    starts Valgrind with it off)."""
    return platform.machine() in ("x86_64", "AMD64")


class Counted(BaseException):
    """Raised by ctx.measure() in a counting worker once the step is counted: what a workload
    does after measuring (references, correctness) is not counted, and under Valgrind it took
    a third of a count's time. A BaseException, so that a workload's `except Exception` around
    measure() does not swallow it."""


def keep_priority() -> None:
    """A process started niced in a session of its own stays niced. On Linux each session is
    an autogroup, which the scheduler weighs as one process of the group's own nice (0),
    whatever its processes' nice: a counting process (suite/execute/counting.py NICE) would
    take as much CPU as the rollback checks beside it, whose clock it then slows. The group is
    given the process's nice; where there are no autogroups nothing changes."""
    niceness = os.nice(0)
    if niceness <= 0:
        return
    try:
        with open("/proc/self/autogroup", "w", encoding="ascii") as group:
            group.write(str(niceness))
    except OSError:
        pass


def steps_to_count() -> int | None:
    """The steps this worker counts, when its parent started it to count them."""
    value = os.environ.get(COUNT_VAR, "").strip()
    return int(value) if value.isdigit() and int(value) > 0 else None


def under_valgrind() -> bool:
    """Whether this process runs under Valgrind (its preloaded core is mapped): a wrapper that
    execs the interpreter out from under it would leave the count at nothing."""
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
            return "vgpreload" in maps.read()
    except OSError:
        return False


def count_steps(fn: Callable[[], Any], sync: Callable[[], None], steps: int) -> dict[str, Any]:
    """Cold call and warm-up outside the count, then `steps` calls inside it, with Python's
    cyclic collector off: a collection that one process's earlier allocations happen to
    trigger inside the count and another's not would be counted as the step's."""
    import gc

    import torch

    method = os.environ.get(COUNT_WITH_VAR) or "callgrind"
    hardware: ThreadInstructions | None = None
    requests: ClientRequests | None = None
    if method == "perf":
        hardware = ThreadInstructions()  # CounterUnavailable says why, before any work
    elif not under_valgrind():
        raise RuntimeError("asked to count, but not running under Valgrind (a wrapper that execs?)")
    else:
        requests = ClientRequests()
        if not requests.running_on_valgrind():
            raise RuntimeError("Valgrind did not answer a client request: nothing would be counted")
    began = time.perf_counter()
    fn()
    cold = time.perf_counter()
    for _ in range(WARMUP_CALLS):
        fn()
    sync()
    warm = time.perf_counter()
    gc.collect()
    gc.disable()
    total = None
    if hardware is not None:
        hardware.start()
    elif requests is not None:
        requests.start()
    try:
        for _ in range(steps):
            fn()
        sync()
    finally:
        if hardware is not None:
            total = hardware.stop()
            hardware.close()
        elif requests is not None:
            requests.stop()
        gc.enable()
    counted = time.perf_counter()
    # Under callgrind the parent reads the count from the profile; the hardware's is here.
    hardware_count = {} if total is None else {"total": total, "per_step": total / steps}
    return {
        **hardware_count,
        "method": method,
        "steps": steps,
        "warmup_calls": 1 + WARMUP_CALLS,
        "threads": torch.get_num_threads(),
        "capability": torch.backends.cpu.get_cpu_capability(),
        # Wall seconds under Valgrind: what a count costs, and where.
        "wall_s": {
            "cold": round(cold - began, 2),
            "warmup": round(warm - cold, 2),
            "counted": round(counted - warm, 2),
        },
    }
