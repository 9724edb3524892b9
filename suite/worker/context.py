"""What a workload sees of its cell (the worker's CellContext), and what the worker records
from it: the outputs kept for drift, the timing and memory measurements, the threads, a trace."""

from __future__ import annotations

import os
import random
import shutil
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from suite.core import accuracy, stats
from suite.core.records import (
    AccuracyCheck,
    Correctness,
    ProcessRecord,
    Result,
    ThreadsRecord,
)
from suite.core.spec import CellSpec
from suite.worker import faults
from suite.worker.backends import Backend
from suite.worker.counting import Counted, count_steps, steps_to_count
from suite.worker.identity import finite_or_none, model_record
from suite.worker.measure import (
    BUDGETS,
    FLOOR_SAMPLES,
    Timing,
    memory_pass,
    run_timed,
)
from suite.worker.memory import MemoryTracker
from suite.worker.ranks import over_ranks, rank_env
from suite.workloads.base import CellContext, ExportAttempt, Fault, ParamValue

if TYPE_CHECKING:
    import torch

_DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16", "fp64": "float64"}


class WorkerContext(CellContext):
    def __init__(self, spec: CellSpec, backend: Backend, size: Mapping[str, Any]) -> None:
        import torch

        self.params: Mapping[str, ParamValue] = spec.params_dict
        self.profile = spec.profile
        self.size = size
        self.backend = backend
        self.rank, self.world_size, local_rank = rank_env()
        self.device = backend.device()
        if self.world_size > 1 and backend.device_type == "cuda":
            self.device = torch.device("cuda", local_rank)
            torch.cuda.set_device(self.device)
        self.rank_metrics: dict[str, dict[str, Any]] = {}
        self.timing: Timing | None = None
        # The sizes a counting worker counts at instead of the profile's (Workload.count_sizes).
        self.count_size: dict[str, Any] = {}
        self.counted: dict[str, Any] | None = None  # a counting worker's steps (counting.py)
        self.step: Callable[[], Any] | None = None
        self.tracker: MemoryTracker | None = None
        self.items_per_iter: float | None = None
        self.unit: str | None = None
        self.checks: list[AccuracyCheck] = []
        self.metrics: dict[str, dict[str, Any]] = {}
        self.warnings: list[str] = []
        self.fallbacks: list[str] = []
        self.outputs: dict[str, torch.Tensor] = {}
        self.curve: dict[str, Any] | None = None  # ctx.loss_curve
        self.model_record: dict[str, Any] | None = None  # ctx.model
        self.exports: dict[str, dict[str, Any]] = {}  # ctx.export_path, by path
        self._scratch: Path | None = None
        self.fault: Fault | None = None  # the workload's, set by the worker (faults.py)
        self._torch = torch

    def dtype(self, name: str | None = None) -> torch.dtype:
        key = name if name is not None else str(self.params.get("dtype", "fp32"))
        if key not in _DTYPES:
            raise ValueError(f"unknown dtype {key!r}; expected one of {', '.join(_DTYPES)}")
        dtype: torch.dtype = getattr(self._torch, _DTYPES[key])
        return dtype

    def fell_back(self, message: str) -> None:
        self.fallbacks.append(str(message)[:500])

    def seed(self, value: int = 0) -> None:
        random.seed(value)
        self._torch.manual_seed(value)

    def measure(
        self,
        fn: Callable[[], Any],
        *,
        items_per_iter: float,
        unit: str | None = None,
        compiled: bool = False,
    ) -> None:
        if self.timing is not None or self.counted is not None:
            raise RuntimeError("ctx.measure() may be called once per cell")
        steps = steps_to_count()
        if steps is not None:
            # A counting worker counts the step and nothing else: no clock, no memory pass.
            self.counted = {**count_steps(fn, self.backend.sync, steps), "size": self.count_size}
            self.items_per_iter = float(items_per_iter)
            self.unit = unit
            self.step = fn
            raise Counted
        self.tracker = self.backend.memory_tracker()
        budget = BUDGETS[self.profile]
        # Ranks sample as often as the slowest rank's warmup plans, fixed before the first.
        agree = (lambda n: int(min(over_ranks(n)))) if self.world_size > 1 else None
        # The CPUs this cell is expected to keep busy itself: its threads on every local rank
        # (a GPU cell's host thread); anything beyond the rest is another process's.
        import torch

        threads = torch.get_num_threads() if self.backend.device_type == "cpu" else 1
        self.timing = run_timed(
            fn,
            self.backend.sync,
            budget,
            compiled=compiled,
            threads=threads * self.world_size,
            agree=agree,
        )
        # Peak memory comes from its own pass: its allocator settings and sampler thread would
        # change the timings they ran beside.
        tracker = self.tracker
        prime = tracker.mark if tracker.primes else None
        memory_pass(fn, self.backend.sync, tracker.start, tracker.stop, mark=prime)
        self.items_per_iter = float(items_per_iter)
        self.unit = unit
        self.step = fn

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
        dtype_name = dtype or str(self.params.get("dtype", "fp32"))
        # What is checked against fp64 is also what drift between torch pins is measured on.
        if isinstance(result, self._torch.Tensor):
            self.outputs.setdefault(label, result.detach().to("cpu"))
        else:
            for i, tensor in enumerate(result):
                self.outputs.setdefault(f"{label}[{i}]", tensor.detach().to("cpu"))
        verdict = accuracy.judge(
            accuracy.rmse(result, fp64), accuracy.rmse(reference, fp64), dtype_name
        )
        self.checks.append(
            {"label": label, "reference": reference_name, "dtype": dtype_name, **verdict.as_dict()}
        )
        return verdict.passed

    def metric(self, name: str, value: float | str | bool | None, unit: str | None = None) -> None:
        self.metrics[name] = {"value": value, "unit": unit}

    def warn(self, message: str) -> None:
        self.warnings.append(message)

    def rank_metric(
        self, name: str, value: float | str | bool | None, unit: str | None = None
    ) -> None:
        self.rank_metrics[name] = {"value": value, "unit": unit}

    def loss_curve(
        self, values: Sequence[float], *, reference: Sequence[float] | None = None
    ) -> None:
        self.curve = {
            "values": finite_or_none(values),
            "reference": finite_or_none(reference) if reference is not None else None,
        }

    def model(self, module: torch.nn.Module, *, config: Any = None) -> None:
        self.model_record = model_record(module, config)

    def exported(self, attempt: ExportAttempt) -> None:
        error = attempt.max_abs_error
        self.exports[attempt.path] = {
            "ok": attempt.ok,
            "error": attempt.error,
            "max_abs_error": float(error) if error is not None else None,
        }

    def save_outputs(self, tensors: Mapping[str, torch.Tensor]) -> None:
        for name, tensor in tensors.items():
            self.outputs[name] = tensor.detach().to("cpu")

    @property
    def scratch(self) -> Path:
        if self._scratch is None:
            self._scratch = Path(tempfile.mkdtemp(prefix="torch-matrix-scratch-"))
        return self._scratch

    @property
    def durable(self) -> Path:
        folder = faults.durable_dir()
        if folder is None:  # a cell run by hand, outside the harness: no restart to outlive
            return self.scratch
        folder.mkdir(parents=True, exist_ok=True)
        return folder

    def step_done(self, step: int) -> None:
        faults.kill_here(self.fault, self.rank, step, faults.durable_dir())

    def killed_at(self) -> float | None:
        return faults.killed_at(faults.durable_dir())

    def cleanup(self) -> None:
        if self._scratch is not None:
            shutil.rmtree(self._scratch, ignore_errors=True)


def _correctness(checks: list[AccuracyCheck]) -> Correctness | None:
    """The cell passes only if every check passes; the worst check's numbers lead."""
    if not checks:
        return None
    worst = max(
        checks, key=lambda c: (not c["passed"], c["rmse_result"] - c["k"] * c["rmse_reference"])
    )
    return {
        "passed": all(c["passed"] for c in checks),
        "dtype": worst["dtype"],
        "rmse_result": worst["rmse_result"],
        "rmse_reference": worst["rmse_reference"],
        "k": worst["k"],
        "tol": worst["tol"],
        "reference": worst["reference"],
        "checks": checks,
    }


OUTPUT_CAP_ELEMENTS = 1 << 20


def _tensor_bytes(tensor: torch.Tensor) -> bytes:
    import torch

    raw = tensor.contiguous().reshape(-1).view(torch.uint8)  # 0-d tensors cannot be viewed
    try:
        return bytes(raw.numpy().tobytes())
    except RuntimeError:  # a torch without numpy beside it
        return bytes(raw.tolist())


def save_outputs(ctx: WorkerContext, path: Path) -> dict[str, Any]:
    """Write the workload's outputs beside the results; return their digest for the record."""
    import hashlib

    import torch

    kept: dict[str, torch.Tensor] = {}
    digest: dict[str, Any] = {}
    for name, tensor in ctx.outputs.items():
        flat = tensor.contiguous().view(-1)
        sampled = flat.numel() > OUTPUT_CAP_ELEMENTS
        if sampled:
            step = -(-flat.numel() // OUTPUT_CAP_ELEMENTS)
            flat = flat[::step]
        kept[name] = flat.clone()
        as_float = tensor.double() if tensor.is_floating_point() else tensor.to(torch.float64)
        digest[name] = {
            "shape": list(tensor.shape),
            "dtype": str(tensor.dtype).removeprefix("torch."),
            "sha256": hashlib.sha256(_tensor_bytes(tensor) if tensor.numel() else b"").hexdigest(),
            "abs_max": float(as_float.abs().max()) if tensor.numel() else 0.0,
            "mean": float(as_float.mean()) if tensor.numel() else 0.0,
            "sampled": sampled,
        }
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    torch.save(kept, tmp)
    os.replace(tmp, path)
    return {"file": str(path), "tensors": digest}


def fill_measurements(doc: Result, ctx: WorkerContext) -> None:
    if ctx.timing is not None:
        timing = ctx.timing.as_dict()
        doc["timing"] = timing
        rel = timing["summary"]["relative_iqr"]
        count = len(timing["samples_s"])
        doc["noise"] = {
            "relative_iqr": rel,
            "grade": stats.noise_grade(rel),
            "threshold": stats.NOISY_RELATIVE_IQR,
            "samples": count,
            "low_samples": count < FLOOR_SAMPLES,
        }
        doc["threads"] = _threads()
        doc["process"] = process_settings()
        if ctx.items_per_iter:
            doc["throughput"] = {
                "unit": ctx.unit or "items/s",
                "items_per_iter": ctx.items_per_iter,
                "value": stats.throughput(ctx.items_per_iter, timing["summary"]["p50"]),
            }
    if ctx.tracker is not None and ctx.tracker.measured:
        doc["memory"] = ctx.tracker.as_dict()
    if ctx.counted is not None:
        doc["instructions"] = ctx.counted
    doc["correctness"] = _correctness(ctx.checks)
    doc["metrics"] = ctx.metrics
    doc["warnings"] = [*doc.get("warnings", []), *ctx.warnings]  # what the worker said first stays
    if ctx.curve is not None:
        doc["loss_curve"] = ctx.curve
    if ctx.model_record is not None:
        doc["model"] = ctx.model_record
    if ctx.exports:
        doc["exports"] = ctx.exports


_THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "KMP_AFFINITY")


def process_settings() -> ProcessRecord:
    """The process-level settings beside the thread counts that bear on timing noise: the hash
    seed, address randomization (personality's ADDR_NO_RANDOMIZE) and the machine's
    transparent huge pages. Measured with bench/noise_controls.py; none is changed here."""

    def read(path: str) -> str | None:
        try:
            with open(path, encoding="ascii") as f:
                return f.read().strip()
        except OSError:
            return None

    personality = read("/proc/self/personality")
    thp = read("/sys/kernel/mm/transparent_hugepage/enabled")
    chosen = thp.split("[", 1)[1].split("]", 1)[0] if thp and "[" in thp else thp
    return {
        "hash_seed": os.environ.get("PYTHONHASHSEED"),
        "aslr": None if personality is None else not int(personality, 16) & 0x0040000,
        "transparent_hugepages": chosen,
        "affinity": sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
    }


def _threads() -> ThreadsRecord:
    """Thread counts and CPU affinity the timed samples ran with."""
    import torch

    affinity = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    return {
        "intra_op": torch.get_num_threads(),
        "inter_op": torch.get_num_interop_threads(),
        "affinity": affinity,
        "env": {k: os.environ[k] for k in _THREAD_VARS if k in os.environ},
    }


# Steps in a saved trace, after one unprofiled call: one step's op times are noise at smoke
# sizes, and the op-level difference of two sides must show the change, not the noise.
TRACE_STEPS = 5


def write_trace(ctx: WorkerContext, path: Path) -> None:
    """TRACE_STEPS more steady-state steps under torch.profiler, saved as a Chrome trace."""
    from torch.profiler import ProfilerActivity, profile

    if ctx.step is None:
        return
    activities = [ProfilerActivity.CPU]
    if ctx.backend.device_type == "cuda":
        activities.append(ProfilerActivity.CUDA)
    ctx.step()
    ctx.backend.sync()
    with profile(activities=activities, record_shapes=True) as prof:
        for _ in range(TRACE_STEPS):
            ctx.step()
        ctx.backend.sync()
    path.parent.mkdir(parents=True, exist_ok=True)
    prof.export_chrome_trace(str(path))
