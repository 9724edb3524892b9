"""What the parent and the worker both read of the host, without torch: the CPU's model, the
memory, and the environment variables that shape a run and that name a side's image."""

from __future__ import annotations

import platform
import re

# Variables recorded with every run: they change what torch does.
ENV_PREFIXES = (
    "TORCH",
    "PYTORCH",
    "CUDA",
    "NCCL",
    "OMP",
    "MKL",
    "HIP",
    "ROCM",
    "HSA",
    "KMP",
    "GLOO",
    "MALLOC_",
)
# Set by the parent in a docker side's container: which image the worker runs in.
IMAGE_REF_VAR = "TORCH_MATRIX_IMAGE"
IMAGE_DIGEST_VAR = "TORCH_MATRIX_IMAGE_DIGEST"


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def memory_total_bytes() -> int | None:
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            match = re.search(r"^MemTotal:\s+(\d+) kB", fh.read(), re.MULTILINE)
    except OSError:
        return None
    return int(match.group(1)) * 1024 if match else None
