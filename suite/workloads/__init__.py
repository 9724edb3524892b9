"""Workload registry: built-ins, the 'torch_matrix.workloads' entry-point group, and
'module:object' or 'path/to/file.py:object' references."""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import importlib.util
import inspect
import io
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from importlib.metadata import entry_points
from pathlib import Path
from types import ModuleType
from typing import Any

from suite.core.errors import WorkloadError
from suite.core.records import SourceRecord
from suite.workloads.base import CellContext, Fault, Param, Skip, Unsupported, Workload

__all__ = [
    "CellContext",
    "Fault",
    "Param",
    "Resolved",
    "Skip",
    "Unsupported",
    "Workload",
    "builtin_names",
    "file_part",
    "resolve",
]

ENTRY_POINT_GROUP = "torch_matrix.workloads"

BUILTINS: dict[str, str] = {
    "flex_attention": "suite.workloads.flex_attention:FlexAttention",
    "sdpa": "suite.workloads.sdpa:Sdpa",
    "linear_cross_entropy": "suite.workloads.linear_cross_entropy:LinearCrossEntropy",
    "mlp_train": "suite.workloads.mlp_train:MlpTrain",
    "compile": "suite.workloads.compile:Compile",
    "export": "suite.workloads.export:Export",
    "determinism": "suite.workloads.determinism:Determinism",
    "collectives": "suite.workloads.collectives:Collectives",
    "fsdp2": "suite.workloads.fsdp2:Fsdp2",
    "checkpoint": "suite.workloads.checkpoint:Checkpoint",
    "recovery": "suite.workloads.recovery:Recovery",
    "reshard": "suite.workloads.reshard:Reshard",
    "cutedsl": "suite.workloads.cutedsl:CuteDslAdd",
    "hf_model": "suite.workloads.hf_model:HfModel",
}


@dataclass(frozen=True)
class Resolved:
    ref: str
    workload: Workload
    module: str
    object: str
    file: str | None
    sha256: str | None

    def source(self) -> SourceRecord:
        return {
            "module": self.module,
            "object": self.object,
            "file": self.file,
            "sha256": self.sha256,
        }


def builtin_names() -> list[str]:
    return sorted(BUILTINS)


def file_part(ref: str) -> str | None:
    """The file of a `path/to/file.py:object` reference; None for built-in, entry-point and
    `module:object` references."""
    module_part, sep, _ = ref.rpartition(":")
    if not sep or not module_part:
        return None
    return module_part if module_part.endswith(".py") or "/" in module_part else None


def _import_file(path: Path, ref: str) -> ModuleType:
    if not path.is_file():
        raise WorkloadError(f"workload file {path} does not exist", path=ref)
    name = f"torch_matrix_plugin_{hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:12]}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise WorkloadError(f"cannot import {path} as a Python module", path=ref)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


# What a plugin prints while it is imported goes to stderr, this much at most: never into a
# command's stdout, where it would break --format json.
IMPORT_OUTPUT_CAP = 64 << 10


class _Capped(io.TextIOBase):
    def __init__(self) -> None:
        self.kept: list[str] = []
        self.size = 0

    def write(self, text: str) -> int:
        room = IMPORT_OUTPUT_CAP - self.size
        if room > 0:
            self.kept.append(text[:room])
        self.size += len(text)
        return len(text)


@contextlib.contextmanager
def _import_output(ref: str) -> Iterator[None]:
    sink = _Capped()
    try:
        with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
            yield
    finally:
        if sink.size:
            sys.stderr.write("".join(sink.kept))
            if sink.size > IMPORT_OUTPUT_CAP:
                sys.stderr.write(
                    f"\n[workload {ref}: {sink.size - IMPORT_OUTPUT_CAP} more characters "
                    "printed while it was imported, not shown]\n"
                )


def _load(target: str, ref: str) -> tuple[ModuleType, str, Any]:
    module_part, sep, obj_part = target.rpartition(":")
    if not sep or not module_part or not obj_part:
        raise WorkloadError(
            f"workload reference {ref!r} must be a built-in name "
            f"({', '.join(builtin_names())}), an entry-point name, 'module:object' "
            "or 'path/to/file.py:object'"
        )
    try:
        with _import_output(ref):
            if file_part(target) is not None:
                module = _import_file(Path(module_part), ref)
            else:
                module = importlib.import_module(module_part)
    except WorkloadError:
        raise
    except SystemExit as exc:  # never a silent exit 0 from the middle of a command
        raise WorkloadError(
            f"importing {module_part!r} for workload {ref!r} called sys.exit({exc.code!r})"
        ) from None
    except Exception as exc:  # a plugin's import error is the user's to see, not a traceback
        raise WorkloadError(
            f"importing {module_part!r} for workload {ref!r} failed: {exc!r}"
        ) from exc
    obj: Any = module
    for attr in obj_part.split("."):
        if not hasattr(obj, attr):
            raise WorkloadError(f"{module_part!r} has no attribute {obj_part!r} (workload {ref!r})")
        obj = getattr(obj, attr)
    return module, obj_part, obj


def _instantiate(obj: Any, ref: str) -> Workload:
    if inspect.isclass(obj):
        obj = obj()
    if not isinstance(obj, Workload) and not (hasattr(obj, "run") and hasattr(obj, "name")):
        raise WorkloadError(
            f"{ref!r} is neither a Workload subclass nor an object with 'name' and 'run'"
        )
    if not getattr(obj, "name", ""):
        raise WorkloadError(f"workload {ref!r} has an empty 'name'")
    return obj  # type: ignore[no-any-return]


def _file_digest(module: ModuleType) -> tuple[str | None, str | None]:
    file = getattr(module, "__file__", None)
    if not file:
        return None, None
    try:
        digest = hashlib.sha256(Path(file).read_bytes()).hexdigest()
    except OSError:
        return file, None
    return str(Path(file).resolve()), digest


def resolve(ref: str) -> Resolved:
    """Resolve a workload reference to an instance and the evidence of where it came from."""
    target = BUILTINS.get(ref)
    if target is None and ":" not in ref:
        for ep in entry_points(group=ENTRY_POINT_GROUP):
            if ep.name == ref:
                target = ep.value
                break
    if target is None:
        if ":" not in ref:
            raise WorkloadError(
                f"unknown workload {ref!r}: not built in ({', '.join(builtin_names())}), not in "
                f"the {ENTRY_POINT_GROUP!r} entry-point group, and not 'module:object'"
            )
        target = ref
    module, obj_name, obj = _load(target, ref)
    workload = _instantiate(obj, ref)
    file, digest = _file_digest(module)
    return Resolved(ref, workload, module.__name__, obj_name, file, digest)
