"""A short synced median beside a cell's own timing: the speed of its reference, of the eager
model, of the torch op a kernel replaces. Context for the row, or a ratio measured the same way
on both sides; the cell's timing itself is what ctx.measure takes."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable


def synced_median_s(fn: Callable[[], object], sync: Callable[[], None], iters: int) -> float:
    """One warm call, then the median of `iters` calls, the device synced around each."""
    fn()
    sync()
    samples = []
    for _ in range(iters):
        sync()
        start = time.perf_counter()
        fn()
        sync()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)
