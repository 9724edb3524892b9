"""The environment record: what torch, what hardware, what settings a run saw."""

from __future__ import annotations

import os
import platform
import re
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


def normalized(name: str) -> str:
    """A distribution's name as PEP 503 compares them: Jinja2 and jinja2, typing_extensions
    and typing-extensions are one."""
    return re.sub(r"[-_.]+", "-", name).lower()


def distributions() -> dict[str, str]:
    """Every distribution installed where this interpreter looks, by normalized name: what a
    workload may import beside torch (transformers, timm), whose version is the workload's."""
    from importlib.metadata import distributions as installed

    out: dict[str, str] = {}
    for dist in installed():
        name = dist.metadata["Name"]
        if name and normalized(name) not in out:  # the first on sys.path is the one imported
            out[normalized(name)] = dist.version
    return dict(sorted(out.items()))


HARNESS_PACKAGE = __name__.split(".")[0]


def imported_distributions(before: set[str]) -> dict[str, str]:
    """The distributions whose top-level modules were imported since BEFORE (a snapshot of
    sys.modules), by normalized name: the libraries the workload used, whose versions are part
    of what it measured. Modules of no distribution (the plugin's own file) are left out, and
    so is this harness: it is the same code on both sides, installed on one (the baseline's
    interpreter) and passed by path to the other."""
    from importlib.metadata import PackageNotFoundError, packages_distributions, version

    tops = {name.split(".")[0] for name in set(sys.modules) - before} - {HARNESS_PACKAGE}
    owners = packages_distributions()
    out: dict[str, str] = {}
    for top in sorted(tops):
        for dist in owners.get(top, []):
            try:
                out[normalized(dist)] = version(dist)
            except PackageNotFoundError:
                continue
    return dict(sorted(out.items()))


def torch_requires() -> list[str]:
    """The distributions torch itself requires (its Requires-Dist names): they move with it."""
    from importlib.metadata import PackageNotFoundError, requires

    try:
        found = requires("torch") or []
    except PackageNotFoundError:
        return []
    names = {normalized(re.split(r"[\s;<>=!~\[(@]", req, maxsplit=1)[0]) for req in found}
    return sorted(n for n in names if n)


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
        "distributions": distributions(),
        "torch_requires": torch_requires(),
    }
