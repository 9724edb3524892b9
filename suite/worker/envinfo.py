"""The environment record: what torch, what hardware, what settings a run saw."""

from __future__ import annotations

import os
import platform
import socket
import sys
from typing import Any

from suite.core.host import (
    ENV_PREFIXES,
    IMAGE_DIGEST_VAR,
    IMAGE_REF_VAR,
    cpu_model,
    memory_total_bytes,
)
from suite.core.secrets import redact
from suite.worker.backends import every_backend


def relevant_env() -> dict[str, str]:
    """The variables that shape a run (ENV_PREFIXES), secrets redacted (suite/core/secrets.py)."""
    return redact({k: v for k, v in os.environ.items() if k.startswith(ENV_PREFIXES)})


def _package_versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out: dict[str, str] = {}
    for name in ("torch", "numpy", "triton", "onnx", "onnxruntime", "onnxscript", "torchcomms"):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            continue
    return out


def torch_info() -> dict[str, Any]:
    import torch

    cudnn: Any = None
    try:
        if torch.backends.cudnn.is_available():
            cudnn = torch.backends.cudnn.version()
    except Exception:
        cudnn = None
    nccl: str | None = None
    try:
        if torch.cuda.is_available() and hasattr(torch.cuda, "nccl"):
            v = torch.cuda.nccl.version()
            nccl = ".".join(map(str, v)) if isinstance(v, tuple) else str(v)
    except Exception:
        nccl = None
    return {
        "version": torch.__version__,
        "git_version": getattr(torch.version, "git_version", None),
        "cuda": torch.version.cuda,
        "hip": torch.version.hip,
        "cudnn": cudnn,
        "nccl": nccl,
        "debug": bool(torch.version.debug),
    }


def environment() -> dict[str, Any]:
    """Build the record in the interpreter that runs the cells (imports torch)."""
    image = None
    if os.environ.get(IMAGE_REF_VAR) or os.environ.get(IMAGE_DIGEST_VAR):  # set by the container
        image = {
            "reference": os.environ.get(IMAGE_REF_VAR),
            "digest": os.environ.get(IMAGE_DIGEST_VAR),
            "base": os.environ.get("TORCH_MATRIX_IMAGE_BASE"),
        }
    return {
        "kind": "torch-matrix/environment",
        "schema_version": 1,
        "interpreter": sys.executable,
        "python": platform.python_version(),
        "os": {
            "system": platform.system(),
            "release": platform.release(),
            "platform": platform.platform(),
        },
        "hostname": socket.gethostname(),
        "cpu": {"model": cpu_model(), "logical_cores": os.cpu_count()},
        "memory_total_bytes": memory_total_bytes(),
        "torch": torch_info(),
        "backends": {name: b.probe().as_dict() for name, b in every_backend().items()},
        "env_vars": relevant_env(),
        "image": image,
        "packages": _package_versions(),
    }
