"""Backend registry: availability, device, synchronization and the peak-memory tracker
(suite/worker/memory.py) per backend.

Imports torch lazily so that planning a run needs no torch in the parent process.
"""

from __future__ import annotations

import functools
import importlib
import os
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from suite.core.backends import BackendEntry, backend_entry, backend_names
from suite.worker.memory import (
    CpuAllocatorTracker,
    CudaAllocatorTracker,
    MemoryTracker,
    MpsDriverTracker,
)

if TYPE_CHECKING:
    import torch


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
        return CpuAllocatorTracker()


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
