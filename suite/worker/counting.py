"""Counting a cell's step in instructions, inside a worker that runs under Valgrind's callgrind.

The parent (suite/execute/counting.py) starts the worker as `valgrind --tool=callgrind
--collect-atstart=no … python -m suite.worker cell …` with COUNT_VAR set to the number of steps
to count. Then ctx.measure() does not time: it makes the same cold call and WARMUP_CALLS warm-up
calls as every counted process, turns callgrind's collection on (torch's own client request),
runs the step that many times, and turns it off. The count is the instructions those steps
executed on this thread: deterministic to well under 0.1% for a fixed build and input, where a
clock on a shared 2-vCPU runner spreads 10-20% process to process.

It counts the kernels Valgrind's CPU emulation selects (torch reports AVX2 under Valgrind where
the host has AVX-512), on one thread; cache misses, memory bandwidth, frequency and thread
scaling are outside it (README, the instructions gate).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

COUNT_VAR = "TORCH_MATRIX_COUNT_STEPS"
WARMUP_CALLS = 5


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

    if not torch._C._valgrind_supported_platform():
        raise RuntimeError("this torch build has no Valgrind client requests to count with")
    if not under_valgrind():
        raise RuntimeError("asked to count, but not running under Valgrind (a wrapper that execs?)")
    fn()
    for _ in range(WARMUP_CALLS):
        fn()
    sync()
    gc.collect()
    gc.disable()
    torch._C._valgrind_toggle()
    try:
        for _ in range(steps):
            fn()
        sync()
    finally:
        torch._C._valgrind_toggle()
        gc.enable()
    return {
        "steps": steps,
        "warmup_calls": 1 + WARMUP_CALLS,
        "threads": torch.get_num_threads(),
        "capability": torch.backends.cpu.get_cpu_capability(),
    }
