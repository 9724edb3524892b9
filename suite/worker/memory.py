"""Peak-memory trackers, one per backend: the figure the memory pass records (suite/worker/
measure.py memory_pass) and the gates judge (suite/judge/memory.py).

CPU: the most bytes the step's tensors held at once, from the allocator's profiler events, with
RSS beside it (advisory). CUDA and ROCm: the caching allocator's peak. MPS: the driver's
allocation, sampled on a thread. Torch is imported lazily.
"""

from __future__ import annotations

import ctypes
import re
import sys
import threading
from abc import ABC, abstractmethod
from typing import Any, ClassVar

from suite.core.records import MemoryRecord

_SAMPLE_INTERVAL_S = 0.001


class MemoryTracker(ABC):
    """Peak memory above the baseline taken at start(), for the region up to stop()."""

    method: ClassVar[str]
    # Whether the memory pass makes one call before mark() that the figure leaves out (the CPU
    # figure's: a block allocated before the profiler started is freed unreported, so the state a
    # step replaces must have been allocated under it).
    primes: ClassVar[bool] = False

    def __init__(self) -> None:
        self.baseline_bytes: int | None = None
        self.peak_bytes: int = 0
        self.samples = 0
        self.measured = False  # stop() ran and read a peak

    @abstractmethod
    def start(self) -> None: ...

    @abstractmethod
    def stop(self) -> None: ...

    def mark(self) -> None:  # noqa: B027 - a tracker that does not prime needs no mark
        """Where the figure begins, for a tracker that primes (after the priming call)."""

    def as_dict(self) -> MemoryRecord:
        from suite.worker.measure import MEMORY_PASS_CALLS

        return {
            "method": self.method,
            "baseline_bytes": self.baseline_bytes,
            "peak_bytes": max(0, self.peak_bytes),
            "samples": self.samples,
            "pass": "memory",
            "calls": MEMORY_PASS_CALLS,
        }


def _read_status_kib(field: str) -> int | None:
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            match = re.search(rf"^{field}:\s+(\d+) kB", fh.read(), re.MULTILINE)
    except OSError:
        return None
    return int(match.group(1)) * 1024 if match else None


def current_rss_bytes() -> int:
    rss = _read_status_kib("VmRSS")
    if rss is not None:
        return rss
    import resource  # macOS: no /proc; ru_maxrss is the best there is (bytes on macOS)

    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)


class _Sampler:
    """Polls a reading on a thread; torch kernels release the GIL, so polling keeps up."""

    def __init__(self, read: Any) -> None:
        self._read = read
        self._stop = threading.Event()
        self.peak = 0
        self.count = 0
        self._thread = threading.Thread(target=self._loop, name="torch-matrix-memory", daemon=True)

    def _loop(self) -> None:
        while not self._stop.is_set():
            value = self._read()
            self.count += 1
            self.peak = max(self.peak, value)
            self._stop.wait(_SAMPLE_INTERVAL_S)

    def start(self) -> None:
        self.peak = self._read()
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self._read())


_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_EXACT_HEAP_BYTES = 128 * 1024


def exact_heap() -> bool:
    """Make RSS follow what the process holds, from here on (glibc): large blocks come from
    mmap and go back on free, and free heap memory is returned now. Otherwise glibc raises its
    thresholds after the first large free and freed tensors stay resident. Used only by the
    memory pass, after the timed samples: the setting slows allocation-heavy code severalfold."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None)
        ok = bool(libc.mallopt(_M_MMAP_THRESHOLD, _EXACT_HEAP_BYTES))
        ok = bool(libc.mallopt(_M_TRIM_THRESHOLD, _EXACT_HEAP_BYTES)) and ok
        libc.malloc_trim(0)
    except (OSError, AttributeError):  # not glibc (musl): RSS sampling still bounds the peak
        return False
    return ok


class CpuRssTracker(MemoryTracker):
    """Peak RSS above the pre-region baseline.

    Resets the kernel's high-water mark (/proc/self/clear_refs) so that VmHWM covers the region
    alone, and samples RSS on a thread as a cross-check where the reset is not permitted.
    ru_maxrss alone would report import-time peaks instead of the region's.
    """

    method = "cpu-rss"

    def __init__(self) -> None:
        super().__init__()
        self._hwm_reset = False
        self._sampler = _Sampler(current_rss_bytes)

    def start(self) -> None:
        exact_heap()
        self.baseline_bytes = current_rss_bytes()
        try:
            with open("/proc/self/clear_refs", "w", encoding="ascii") as fh:
                fh.write("5")
            self._hwm_reset = True
        except OSError:
            self._hwm_reset = False
        self._sampler.start()

    def stop(self) -> None:
        self._sampler.stop()
        peak = self._sampler.peak
        if self._hwm_reset:
            hwm = _read_status_kib("VmHWM")
            if hwm is not None:
                peak = max(peak, hwm)
        self.samples = self._sampler.count
        assert self.baseline_bytes is not None
        self.peak_bytes = peak - self.baseline_bytes
        self.measured = True

    def as_dict(self) -> MemoryRecord:
        out = super().as_dict()
        out["method"] = "cpu-rss-hwm" if self._hwm_reset else "cpu-rss-sampled"
        return out


class CpuAllocatorTracker(MemoryTracker):
    """The most bytes the region's own CPU allocations held at once: every allocation and free
    the CPU allocator reports to the profiler (`profile_memory`), summed in order (the profiler
    reports the frees of what it saw allocated, so what was held before the region neither
    counts nor makes room). It is what the workload allocates, and it
    repeats from process to process; RSS, which moves with the C allocator's arenas, page-fault
    granularity and what is returned to the kernel, is kept beside it as an advisory figure
    (rss_peak_bytes). Where the profiler cannot run, the RSS figure is the figure, and the
    method says so."""

    method = "cpu-allocator"
    primes = True

    def __init__(self) -> None:
        super().__init__()
        self._rss = CpuRssTracker()
        self._profiler: Any = None
        self._events = 0

    def start(self) -> None:
        self._rss.start()
        try:
            from torch.profiler import ProfilerActivity, profile

            self._profiler = profile(activities=[ProfilerActivity.CPU], profile_memory=True)
            self._profiler.start()
        except Exception:  # no profiler here: RSS is the figure
            self._profiler = None

    def mark(self) -> None:
        """A block of SENTINEL_BYTES allocated and freed: the events after it are the figure's."""
        if self._profiler is not None:
            import torch

            block = torch.empty(SENTINEL_BYTES, dtype=torch.uint8)
            del block

    def stop(self) -> None:
        peak = None
        if self._profiler is not None:
            try:
                self._profiler.stop()
                peak, self._events = live_peak(self._profiler.profiler.kineto_results.events())
            except Exception:  # events unreadable: RSS is the figure
                peak = None
        self._rss.stop()
        self.samples = self._rss.samples
        self.baseline_bytes = None if peak is not None else self._rss.baseline_bytes
        self.peak_bytes = peak if peak is not None else self._rss.peak_bytes
        self._profiler = self._profiler if peak is not None else None
        self.measured = self._rss.measured

    def as_dict(self) -> MemoryRecord:
        out = super().as_dict() if self._profiler is not None else self._rss.as_dict()
        if self._profiler is not None:
            out["samples"] = self._events
            out["rss_peak_bytes"] = max(0, self._rss.peak_bytes)
        return out


# A size no tensor of a workload has in practice (a prime number of bytes): mark()'s block.
SENTINEL_BYTES = 104_729


def live_peak(events: Any) -> tuple[int, int]:
    """(the most bytes the recorded allocations held at once after the mark, above what they held
    at it; how many allocation events there were after it). Events are taken in time order; the
    mark is the SENTINEL_BYTES block allocated and freed at once (all events when absent)."""
    found = sorted(
        (
            (e.start_ns(), e.nbytes())
            for e in events
            if e.name() == "[memory]" and getattr(e.device_type(), "name", "") == "CPU"
        ),
        key=lambda event: event[0],
    )
    sizes = [nbytes for _, nbytes in found]
    start = next(
        (
            i + 2
            for i in range(len(sizes) - 1)
            if sizes[i] == SENTINEL_BYTES and sizes[i + 1] == -SENTINEL_BYTES
        ),
        0,
    )
    live = top = 0
    for nbytes in sizes[start:]:
        live += nbytes
        top = max(top, live)
    return top, len(sizes) - start


class CudaAllocatorTracker(MemoryTracker):
    """The caching allocator's own peak (CUDA and ROCm builds share the torch.cuda API)."""

    method = "cuda-allocator"

    def start(self) -> None:
        import torch

        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        self.baseline_bytes = int(torch.cuda.memory_allocated())

    def stop(self) -> None:
        import torch

        torch.cuda.synchronize()
        assert self.baseline_bytes is not None
        self.peak_bytes = int(torch.cuda.max_memory_allocated()) - self.baseline_bytes
        self.samples = 1
        self.measured = True


class MpsDriverTracker(MemoryTracker):
    """MPS exposes no peak counter: sample the driver's allocation on a thread."""

    method = "mps-driver"

    def __init__(self) -> None:
        super().__init__()
        import torch

        self._sampler = _Sampler(lambda: int(torch.mps.driver_allocated_memory()))

    def start(self) -> None:
        import torch

        torch.mps.synchronize()
        self.baseline_bytes = int(torch.mps.driver_allocated_memory())
        self._sampler.start()

    def stop(self) -> None:
        import torch

        torch.mps.synchronize()
        self._sampler.stop()
        self.samples = self._sampler.count
        assert self.baseline_bytes is not None
        self.peak_bytes = self._sampler.peak - self.baseline_bytes
        self.measured = True
