"""Backend registry: availability, device, synchronization and peak-memory tracking per backend.

Imports torch lazily so that planning a run needs no torch in the parent process.
"""

from __future__ import annotations

import ctypes
import functools
import importlib
import os
import re
import sys
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from suite.core.backends import BackendEntry, backend_entry, backend_names
from suite.core.records import MemoryRecord

if TYPE_CHECKING:
    import torch

_SAMPLE_INTERVAL_S = 0.001


@dataclass(frozen=True)
class Availability:
    available: bool
    reason: str | None = None
    devices: tuple[str, ...] = ()
    driver: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "available": self.available,
            "reason": self.reason,
            "devices": list(self.devices),
            "driver": self.driver,
        }


class MemoryTracker(ABC):
    """Peak memory above the baseline taken at start(), for the region up to stop()."""

    method: ClassVar[str]

    def __init__(self) -> None:
        self.baseline_bytes: int | None = None
        self.peak_bytes: int = 0
        self.samples = 0

    @abstractmethod
    def start(self) -> None: ...

    @abstractmethod
    def stop(self) -> None: ...

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

    def as_dict(self) -> MemoryRecord:
        out = super().as_dict()
        out["method"] = "cpu-rss-hwm" if self._hwm_reset else "cpu-rss-sampled"
        return out


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


class Backend(ABC):
    """The worker's side of a backend registered in suite.core.backends, whose entry (name,
    distributed backend, ...) it carries."""

    device_type: ClassVar[str]

    def __init__(self, entry: BackendEntry) -> None:
        self.entry = entry
        self.name = entry.name

    @abstractmethod
    def probe(self) -> Availability: ...

    def device(self) -> torch.device:
        import torch

        return torch.device(self.device_type)

    def sync(self) -> None:  # noqa: B027 - CPU work is synchronous; GPU backends override
        """Wait for queued work; every timed region ends with this."""

    @abstractmethod
    def memory_tracker(self) -> MemoryTracker: ...


class CpuBackend(Backend):
    device_type = "cpu"

    def probe(self) -> Availability:
        return Availability(True, devices=("cpu",))

    def memory_tracker(self) -> MemoryTracker:
        return CpuRssTracker()


def _nvidia_driver() -> str | None:
    import shutil
    import subprocess

    if shutil.which("nvidia-smi") is None:
        return None
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return (
        out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else None
    )


def _gpus(absent: str, driver: Callable[[], str | None]) -> Availability:
    """The GPUs torch.cuda sees (NVIDIA, or AMD through HIP), or why it sees none."""
    import torch

    if not torch.cuda.is_available():
        return Availability(False, f"torch.cuda.is_available() is False: {absent}")
    names = tuple(torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count()))
    return Availability(True, devices=names, driver=driver())


class CudaBackend(Backend):
    device_type = "cuda"

    def probe(self) -> Availability:
        import torch

        if torch.version.hip is not None:
            return Availability(False, "this torch is a ROCm (HIP) build; use the 'rocm' backend")
        if torch.version.cuda is None:
            return Availability(False, f"torch {torch.__version__} is not a CUDA build")
        return _gpus("no usable NVIDIA GPU or driver", _nvidia_driver)

    def sync(self) -> None:
        import torch

        torch.cuda.synchronize()

    def memory_tracker(self) -> MemoryTracker:
        return CudaAllocatorTracker()


class RocmBackend(CudaBackend):
    device_type = "cuda"  # HIP builds of torch expose AMD GPUs as 'cuda' devices

    def probe(self) -> Availability:
        import torch

        if torch.version.hip is None:
            return Availability(False, f"torch {torch.__version__} is not a ROCm (HIP) build")
        return _gpus("no usable AMD GPU (/dev/kfd, /dev/dri)", lambda: None)


class MpsBackend(Backend):
    device_type = "mps"

    def probe(self) -> Availability:
        import torch

        if not torch.backends.mps.is_built():
            return Availability(False, f"torch {torch.__version__} was built without MPS")
        if not torch.backends.mps.is_available():
            return Availability(
                False, "torch.backends.mps.is_available() is False: not on Apple Silicon macOS"
            )
        smoke = mps_smoke(torch)
        if smoke is not None:
            return Availability(False, f"MPS is present but does not compute: {smoke}")
        return Availability(True, devices=("mps",))

    def sync(self) -> None:
        import torch

        torch.mps.synchronize()

    def memory_tracker(self) -> MemoryTracker:
        return MpsDriverTracker()


@functools.cache
def get(name: str) -> Backend:
    """The worker's side of a registered backend: the class its entry's `runtime` names."""
    entry = backend_entry(name)
    module, _, attribute = entry.runtime.partition(":")
    runtime: type[Backend] = getattr(importlib.import_module(module), attribute)
    return runtime(entry)


def every_backend() -> dict[str, Backend]:
    return {name: get(name) for name in backend_names()}


def mps_smoke(torch: Any) -> str | None:
    """A kernel on the GPU, waited for (torch.mps.synchronize) and checked against the CPU:
    None if it computes, else what went wrong. is_available() alone is true in a VM whose Metal
    device cannot run a kernel, and then every timing would be of an error path."""
    try:
        x = torch.arange(64, dtype=torch.float32).reshape(8, 8) / 64
        on_gpu = (x.to("mps") @ x.to("mps")).relu()
        torch.mps.synchronize()
        expected = (x @ x).relu()
        if not torch.allclose(on_gpu.cpu(), expected, rtol=1e-4, atol=1e-5):
            return "an 8x8 matmul on mps differs from the CPU's"
    except Exception as exc:  # any failure of the device is the answer
        return f"{type(exc).__name__}: {exc}"
    return None


def mps_fallback_enabled() -> bool:
    return os.environ.get("PYTORCH_ENABLE_MPS_FALLBACK", "") not in ("", "0")
