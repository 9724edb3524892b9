"""The workload contract: declared parameters, per-profile sizes, and a run() that measures.

A workload is a class (or instance) with a ``name``, a tuple of ``Param``s and a ``run(ctx)``
method. ``run`` builds its inputs on ``ctx.device``, calls ``ctx.measure(fn, ...)`` once for the
steady-state timing and ``ctx.check_accuracy(...)`` for correctness, and raises
``Unsupported`` (or lets torch's ``NotImplementedError`` through) when the backend cannot run it.
Workload modules import torch inside methods, so that planning a run does not need torch.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from suite.core.spec import ParamValue as ParamValue  # plugins import it from here

if TYPE_CHECKING:
    import torch

    from suite.worker.backends import Backend


DTYPES = ("fp32", "bf16", "fp16", "fp64")
REASONS_CAP = 2000  # characters of joined graph-break or recompile reasons kept in a record
# Export paths by the names the export gate's policy `paths` use.
EXPORT_PATHS = ("torch_export", "onnx", "aoti")


def joined_reasons(reasons: Iterable[str]) -> str:
    """Distinct reasons in first-seen order, each on one line, joined and capped for the record."""
    text = " | ".join(dict.fromkeys(" ".join(r.split()) for r in reasons if r.strip()))
    return text if len(text) <= REASONS_CAP else text[: REASONS_CAP - 3] + "..."


@dataclass
class ExportAttempt:
    """One export path a workload tried (CellContext.export_path): set max_abs_error to the
    exported program's largest difference from eager on the same input, when it ran."""

    path: str
    ok: bool = False
    error: str | None = None
    max_abs_error: float | None = None


class Unsupported(Exception):
    """The backend or torch build cannot run this case. Recorded as status 'unsupported'."""


class Skip(Exception):
    """An optional dependency is missing here (say which, and how to install it).

    Recorded as status 'skipped': nothing was learned about torch.
    """


@dataclass(frozen=True)
class Param:
    """A workload parameter: every allowed value, and the values swept by default."""

    name: str
    values: tuple[ParamValue, ...]
    default: tuple[ParamValue, ...]
    help: str = ""

    def __post_init__(self) -> None:
        unknown = [v for v in self.default if v not in self.values]
        if unknown:
            raise ValueError(f"param {self.name}: default values {unknown} not in {self.values}")


class Workload(ABC):
    """Base class for built-in and plugin workloads."""

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    params: ClassVar[tuple[Param, ...]] = ()
    # Problem sizes per profile; run() reads them from ctx.size.
    sizes: ClassVar[Mapping[str, Mapping[str, Any]]] = {"smoke": {}, "full": {}}
    # Sizes the instructions gate counts at, over the profile's (per profile, only the keys
    # that change): a step Valgrind runs ~50x slower than the CPU must stay a few seconds long.
    # Both sides count the same size; the gate's label names it.
    count_sizes: ClassVar[Mapping[str, Mapping[str, Any]]] = {}
    throughput_unit: ClassVar[str] = "items/s"
    # A prototype workload's cells are in the prototype lane whatever the matrix says: its rows
    # never push a decision past `isolate`.
    prototype: ClassVar[bool] = False
    # The cell id's size token, formatted with the profile's sizes: "s{seq}" gives "s256".
    size_tag_format: ClassVar[str | None] = None
    # A workload whose ranks form a world: its cells run under torchrun at the worlds a matrix
    # entry's `world:` sweeps (nodes x ranks per node; default one node of ranks()), and its
    # cell id names the world (n2x2).
    distributed: ClassVar[bool] = False

    def size_tag(self, params: Mapping[str, ParamValue], profile: str) -> str | None:
        """A short token for the cell id that names the problem size (e.g. 's256')."""
        if self.size_tag_format is None:
            return None
        return self.size_tag_format.format(**self.sizes[profile])

    def ranks(self, params: Mapping[str, ParamValue], profile: str) -> int:
        """Processes the cell needs (per node, for a distributed workload: its default world is
        one node of these). Above 1 the harness launches it under torchrun, with the default
        process group initialised (gloo on CPU, nccl on CUDA and ROCm) before run()."""
        return 1

    def fault(self, params: Mapping[str, ParamValue], profile: str) -> Fault | None:
        """A fault the harness injects into the cell: it SIGKILLs rank `rank` once it says it
        finished step `step` (ctx.step_done), on the first attempt only, and torchrun restarts
        the group once (--max-restarts 1). None: no fault."""
        return None

    def restarts(self, params: Mapping[str, ParamValue], profile: str) -> int:
        """How often torchrun may restart the cell's group: 1 where fault() kills a rank."""
        return 1 if self.fault(params, profile) is not None else 0

    def skip_reason(self, params: Mapping[str, ParamValue]) -> str | None:
        """Combinations that make no sense are not planned; say why (None keeps the case)."""
        return None

    @abstractmethod
    def run(self, ctx: CellContext) -> None:
        """Build inputs, call ctx.measure once, check accuracy, record metrics."""


@dataclass(frozen=True)
class Fault:
    """Kill RANK with SIGKILL once it has finished training step STEP (counted from 1)."""

    rank: int
    step: int


class CellContext(ABC):
    """What a running workload sees. Implemented by the worker; documented here for plugins."""

    params: Mapping[str, ParamValue]
    profile: str
    size: Mapping[str, Any]
    backend: Backend
    device: torch.device
    rank: int = 0
    world_size: int = 1

    @abstractmethod
    def dtype(self, name: str | None = None) -> torch.dtype:
        """The torch dtype for a dtype name ('fp32', 'bf16', ...); default: params['dtype']."""

    @abstractmethod
    def seed(self, value: int = 0) -> None:
        """Seed Python's and torch's generators."""

    @abstractmethod
    def measure(
        self,
        fn: Callable[[], Any],
        *,
        items_per_iter: float,
        unit: str | None = None,
        compiled: bool = False,
    ) -> None:
        """Time fn: cold call (compile included), warmup, steady samples; track peak memory.
        In a worker that counts instructions it counts one call instead, and run() ends there:
        what follows measure() is not run (it raises a BaseException the worker catches)."""

    @abstractmethod
    def check_accuracy(
        self,
        result: torch.Tensor | Sequence[torch.Tensor],
        reference: torch.Tensor | Sequence[torch.Tensor],
        fp64: torch.Tensor | Sequence[torch.Tensor],
        *,
        reference_name: str,
        dtype: str | None = None,
        label: str = "output",
    ) -> bool:
        """Record RMSE(result, fp64) <= k * RMSE(reference, fp64) + tol; return the verdict."""

    @abstractmethod
    def metric(self, name: str, value: float | str | bool | None, unit: str | None = None) -> None:
        """A number (or short text) of this cell, recorded under metrics."""

    def loss_curve(
        self, values: Sequence[float], *, reference: Sequence[float] | None = None
    ) -> None:
        """A training run's loss at each step, from a fixed seed: the convergence gate compares
        it with the other pin's. `reference`, the same run in fp64, bounds both."""
        raise NotImplementedError

    def model(self, module: torch.nn.Module, *, config: Any = None) -> None:
        """Name the model this cell runs: its class, parameter count and config (a dict, or an
        object with to_dict(), e.g. a transformers config) go into the evidence."""
        raise NotImplementedError

    def explain(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """torch._dynamo.explain of fn(*args, **kwargs): its graph breaks and their reasons are
        recorded (metrics graph_breaks, graph_count, graph_break_reasons) for the graph_breaks
        gate, as the built-in compile workload records them. Returns the explanation."""
        import torch

        explained = torch._dynamo.explain(fn)(*args, **kwargs)
        self.metric("graph_breaks", int(explained.graph_break_count))
        self.metric("graph_count", int(explained.graph_count))
        self.metric(
            "graph_break_reasons", joined_reasons(str(r.reason) for r in explained.break_reasons)
        )
        return explained

    def recompiles(self, count: int, reasons: Iterable[str] = ()) -> None:
        """Recompilations the workload counted (e.g. over several input shapes), with the guard
        failures that caused them: the recompiles gate reads them."""
        self.metric("recompiles", int(count))
        self.metric("recompile_reasons", joined_reasons(reasons))

    @contextmanager
    def export_path(self, path: str) -> Iterator[ExportAttempt]:
        """Try one export path of the cell's model (torch_export, onnx, aoti, or a name of the
        workload's own): an exception inside the block is recorded as that path failing, and
        the cell goes on. The export gate compares each path between the pins."""
        attempt = ExportAttempt(path)
        try:
            yield attempt
        except Exception as exc:
            attempt.error = f"{type(exc).__name__}: {' '.join(str(exc).split())}"[:600]
        else:
            attempt.ok = True
        self.exported(attempt)

    def exported(self, attempt: ExportAttempt) -> None:
        """Record an export attempt (export_path calls this)."""
        raise NotImplementedError

    @abstractmethod
    def save_outputs(self, tensors: Mapping[str, torch.Tensor]) -> None:
        """Keep outputs and gradients of a fixed-seed step, for drift between torch pins.

        A digest of each tensor goes into the record; the tensors themselves (each capped in
        size) are saved beside the results.
        """

    @property
    @abstractmethod
    def scratch(self) -> Path:
        """A private folder for files the workload makes (exported models); removed after."""

    @property
    def attempt(self) -> int:
        """How often torchrun restarted this cell's group before this run (0: the first)."""
        import os

        return int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") or 0)

    @property
    def durable(self) -> Path:
        """A folder that outlives a restart of the cell's group (the same path on every rank of
        a node), for the checkpoints a resumed run loads; removed after the cell."""
        raise NotImplementedError

    def step_done(self, step: int) -> None:
        """Say that training step STEP (from 1) is done: where the cell's fault says so, the
        harness kills this rank here. Nothing otherwise."""
        return None

    def killed_at(self) -> float | None:
        """The wall time (time.time()) at which the harness killed a rank of this cell, on a
        run after the restart; None where none was killed."""
        return None

    @abstractmethod
    def warn(self, message: str) -> None:
        """A warning that lands in the record."""

    @abstractmethod
    def fell_back(self, message: str) -> None:
        """Some of this cell ran on the CPU instead of its backend (an op with no kernel there,
        run by a CPU path): the fallback gate reads it. On MPS, torch's own fallback warnings
        are recorded without this call."""

    @abstractmethod
    def rank_metric(
        self, name: str, value: float | str | bool | None, unit: str | None = None
    ) -> None:
        """A per-rank number (peak memory, step time): every rank's value lands in the record."""
