"""The worker: runs exactly one cell (or the environment probe) in a fresh process.

Driven by argv, answers through a result file. The parent never unpickles anything from here.
Usage (internal):
  python -m suite.worker probe --out FILE
  python -m suite.worker cell --spec JSON --result FILE --run-id ID [--round N] [--path DIR]
"""

from __future__ import annotations

import argparse
import faulthandler
import os
import random
import shutil
import sys
import tempfile
import time
import traceback
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from suite import accuracy, stats
from suite.backends import Backend, MemoryTracker, get, mps_fallback_enabled
from suite.measure import (
    BUDGETS,
    FLOOR_SAMPLES,
    Budget,
    Timing,
    memory_pass,
    run_timed,
    timer_overhead_s,
)
from suite.results import atomic_write_json, base_result, utc_now, write_result
from suite.spec import CellSpec
from suite.workloads.base import CellContext, ParamValue, Skip, Unsupported

if TYPE_CHECKING:
    import torch

_DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16", "fp64": "float64"}
_OOM_MARKERS = ("out of memory", "can't allocate memory", "cannot allocate memory")
_MPS_FALLBACK_MARKER = "fall back to run on the CPU"


class WorkerContext(CellContext):
    def __init__(self, spec: CellSpec, backend: Backend, size: Mapping[str, Any]) -> None:
        import torch

        self.params: Mapping[str, ParamValue] = spec.params_dict
        self.profile = spec.profile
        self.size = size
        self.backend = backend
        self.rank, self.world_size, local_rank = _rank_env()
        self.device = backend.device()
        if self.world_size > 1 and backend.device_type == "cuda":
            self.device = torch.device("cuda", local_rank)
            torch.cuda.set_device(self.device)
        self.rank_metrics: dict[str, dict[str, Any]] = {}
        self.timing: Timing | None = None
        self.step: Callable[[], Any] | None = None
        self.tracker: MemoryTracker | None = None
        self.items_per_iter: float | None = None
        self.unit: str | None = None
        self.checks: list[dict[str, Any]] = []
        self.metrics: dict[str, dict[str, Any]] = {}
        self.warnings: list[str] = []
        self.outputs: dict[str, torch.Tensor] = {}
        self._scratch: Path | None = None
        self._torch = torch

    def dtype(self, name: str | None = None) -> torch.dtype:
        key = name if name is not None else str(self.params.get("dtype", "fp32"))
        if key not in _DTYPES:
            raise ValueError(f"unknown dtype {key!r}; expected one of {', '.join(_DTYPES)}")
        dtype: torch.dtype = getattr(self._torch, _DTYPES[key])
        return dtype

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
        if self.timing is not None:
            raise RuntimeError("ctx.measure() may be called once per cell")
        self.tracker = self.backend.memory_tracker()
        budget = BUDGETS[self.profile]
        if self.world_size > 1:
            # Ranks must stop sampling together: a time limit read on each rank's own clock
            # would let one rank start a collective that the others never join.
            count = budget.min_iters
            budget = Budget(budget.warmup_iters, count, count, 0.0, float("inf"))
        self.timing = run_timed(fn, self.backend.sync, budget, compiled=compiled)
        # Peak memory comes from its own pass: its allocator settings and sampler thread would
        # change the timings they ran beside.
        memory_pass(fn, self.backend.sync, self.tracker.start, self.tracker.stop)
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

    def save_outputs(self, tensors: Mapping[str, torch.Tensor]) -> None:
        for name, tensor in tensors.items():
            self.outputs[name] = tensor.detach().to("cpu")

    @property
    def scratch(self) -> Path:
        if self._scratch is None:
            self._scratch = Path(tempfile.mkdtemp(prefix="torch-matrix-scratch-"))
        return self._scratch

    def cleanup(self) -> None:
        if self._scratch is not None:
            shutil.rmtree(self._scratch, ignore_errors=True)


def _rank_env() -> tuple[int, int, int]:
    """(rank, world size, local rank) as torchrun sets them; a plain cell is rank 0 of 1."""
    return (
        int(os.environ.get("RANK", "0")),
        int(os.environ.get("WORLD_SIZE", "1")),
        int(os.environ.get("LOCAL_RANK", "0")),
    )


def rank_part_path(result_path: Path, rank: int) -> Path:
    return result_path.with_name(f".{result_path.name}.rank{rank}.json")


def _init_distributed(backend: Backend) -> None:
    import datetime

    import torch.distributed as dist

    # nccl is rccl on ROCm builds (device type "cuda" there too); gloo everywhere else.
    name = "nccl" if backend.device_type == "cuda" else "gloo"
    dist.init_process_group(name, timeout=datetime.timedelta(seconds=300))


def _rank_part(doc: dict[str, Any], ctx: WorkerContext | None, rank: int) -> dict[str, Any]:
    timing = doc.get("timing") or {}
    return {
        "rank": rank,
        "status": doc["status"],
        "failure": (doc.get("failure") or {}).get("message"),
        "mode": (doc.get("failure") or {}).get("mode"),
        "p50_s": (timing.get("summary") or {}).get("p50"),
        "peak_bytes": (doc.get("memory") or {}).get("peak_bytes"),
        "metrics": ctx.rank_metrics if ctx is not None else {},
    }


def _fail_rank(doc: dict[str, Any], ctx: WorkerContext | None, result_path: Path) -> None:
    rank = _rank_env()[0]
    atomic_write_json(rank_part_path(result_path, rank), _rank_part(doc, ctx, rank))
    sys.stderr.flush()
    os._exit(1)


def _gather_ranks(doc: dict[str, Any], ctx: WorkerContext | None, result_path: Path) -> bool:
    """Every rank writes its part; rank 0 folds them into the record. True on rank 0."""
    import json

    rank, world, _ = _rank_env()
    if world == 1:
        return True
    import torch.distributed as dist

    atomic_write_json(rank_part_path(result_path, rank), _rank_part(doc, ctx, rank))
    if dist.is_initialized():
        dist.barrier()
    if rank != 0:
        return False
    parts = []
    for r in range(world):
        path = rank_part_path(result_path, r)
        parts.append(
            json.loads(path.read_text("utf-8"))
            if path.is_file()
            else {"rank": r, "status": "missing"}
        )
        path.unlink(missing_ok=True)
    doc["ranks"] = parts
    bad = [p for p in parts if p["status"] not in ("ok", doc["status"])]
    if bad and doc["status"] == "ok":
        doc["status"] = "failed"
        doc["failure"] = {
            "mode": "exception",
            "message": f"rank {bad[0]['rank']}: {bad[0].get('failure')}",
        }
    return True


def _correctness(checks: list[dict[str, Any]]) -> dict[str, Any] | None:
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


def _classify(exc: BaseException) -> tuple[str, str]:
    """(status, failure mode) for an exception raised by a workload."""
    import torch

    if isinstance(exc, (Unsupported, NotImplementedError)):
        return "unsupported", "unsupported"
    if isinstance(exc, Skip):
        return "skipped", "dependency"
    if isinstance(exc, (MemoryError, torch.OutOfMemoryError)):
        return "oom", "oom"
    if isinstance(exc, RuntimeError) and any(m in str(exc).lower() for m in _OOM_MARKERS):
        return "oom", "oom"
    return "failed", "exception"


# Tensors above this many elements are kept as a fixed strided sample: drift needs the same
# elements on both sides, not all of them.
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


def _fill_measurements(doc: dict[str, Any], ctx: WorkerContext) -> None:
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
        if ctx.items_per_iter:
            doc["throughput"] = {
                "unit": ctx.unit or "items/s",
                "items_per_iter": ctx.items_per_iter,
                "value": stats.throughput(ctx.items_per_iter, timing["summary"]["p50"]),
            }
    if ctx.tracker is not None and ctx.tracker.baseline_bytes is not None:
        doc["memory"] = ctx.tracker.as_dict()
    doc["correctness"] = _correctness(ctx.checks)
    doc["metrics"] = ctx.metrics
    doc["warnings"] = ctx.warnings


_THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "KMP_AFFINITY")


def _threads() -> dict[str, Any]:
    """Thread counts and CPU affinity the timed samples ran with."""
    import torch

    affinity = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    return {
        "intra_op": torch.get_num_threads(),
        "inter_op": torch.get_num_interop_threads(),
        "affinity": affinity,
        "env": {k: os.environ[k] for k in _THREAD_VARS if k in os.environ},
    }


def write_trace(ctx: WorkerContext, path: Path) -> None:
    """One more steady-state step under torch.profiler, saved as a Chrome trace."""
    from torch.profiler import ProfilerActivity, profile

    if ctx.step is None:
        return
    activities = [ProfilerActivity.CPU]
    if ctx.backend.device_type == "cuda":
        activities.append(ProfilerActivity.CUDA)
    with profile(activities=activities, record_shapes=True) as prof:
        ctx.step()
        ctx.backend.sync()
    path.parent.mkdir(parents=True, exist_ok=True)
    prof.export_chrome_trace(str(path))


def run_cell(
    spec: CellSpec,
    run_id: str,
    round_no: int,
    result_path: Path,
    worker_start: float,
    trace: Path | None = None,
) -> int:
    started_at = utc_now()
    doc = base_result(spec, run_id, round_no, started_at)
    t_import = time.perf_counter()
    import torch

    from suite.workloads import resolve

    import_s = time.perf_counter() - t_import
    doc["torch"] = {
        "version": torch.__version__,
        "git_version": getattr(torch.version, "git_version", None),
    }
    from suite.envinfo import IMAGE_DIGEST_VAR, IMAGE_REF_VAR

    if os.environ.get(IMAGE_DIGEST_VAR):
        doc["image"] = {
            "reference": os.environ.get(IMAGE_REF_VAR),
            "digest": os.environ.get(IMAGE_DIGEST_VAR),
        }
    backend = get(spec.backend)
    t_workload = time.perf_counter()
    ctx: WorkerContext | None = None
    caught: list[warnings.WarningMessage] = []
    try:
        resolved = resolve(spec.ref)
        doc["source"] = resolved.source()
        availability = backend.probe()
        if not availability.available:
            doc["status"] = "skipped"
            doc["failure"] = {
                "mode": "unavailable",
                "message": availability.reason or "backend not available",
            }
        else:
            if spec.backend == "mps":
                doc["fallback"] = {
                    "enabled": mps_fallback_enabled(),
                    "happened": False,
                    "messages": [],
                }
            size = dict(resolved.workload.sizes.get(spec.profile, {}))
            ctx = WorkerContext(spec, backend, size)
            if ctx.world_size > 1:
                _init_distributed(backend)
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                resolved.workload.run(ctx)
    except BaseException as exc:
        if isinstance(exc, KeyboardInterrupt):
            raise
        status, mode = _classify(exc)
        message = str(exc) or type(exc).__name__
        doc["status"] = status
        doc["failure"] = {
            "mode": mode,
            "message": message,
            "exception_type": f"{type(exc).__module__}.{type(exc).__qualname__}",
            "signal": None,
            "exit_code": None,
            "stderr_tail": "".join(traceback.format_exception(exc))[-4000:],
        }
        if _rank_env()[1] > 1:
            # The other ranks may wait in a collective this rank will never join: leave now,
            # and torchrun stops them. The parent reads this part for the record.
            _fail_rank(doc, ctx, result_path)
    workload_s = time.perf_counter() - t_workload
    if ctx is not None:
        _fill_measurements(doc, ctx)
        if (
            doc["status"] == "ok"
            and doc["correctness"] is not None
            and not doc["correctness"]["passed"]
        ):
            failed = [c["label"] for c in doc["correctness"]["checks"] if not c["passed"]]
            doc["status"] = "failed"
            doc["failure"] = {
                "mode": "correctness",
                "message": f"accuracy check failed for: {', '.join(failed)}",
            }
    fallback_msgs = [str(w.message) for w in caught if _MPS_FALLBACK_MARKER in str(w.message)]
    if doc["fallback"] is not None and fallback_msgs:
        doc["fallback"].update(happened=True, messages=fallback_msgs[:20])
    doc["finished_at"] = utc_now()
    doc["wall_s"] = time.perf_counter() - worker_start
    doc["harness"] = {
        "worker_wall_s": time.perf_counter() - worker_start,
        "import_s": import_s,
        "workload_s": workload_s,
        "timed_s": ctx.timing.timed_s if ctx is not None and ctx.timing is not None else 0.0,
        "timer_overhead_s": timer_overhead_s(repeats=2000),
        "forked": os.environ.get("TORCH_MATRIX_FORKED") == "1",
    }
    if ctx is not None:
        # Keeping outputs and traces is evidence on top of the measurement: if it breaks, the
        # record says so and keeps the measurement.
        try:
            if ctx.outputs and round_no == 0 and ctx.rank == 0:  # one copy per side is enough
                stem = result_path.name.removesuffix(".json")
                saved = save_outputs(ctx, result_path.parent.parent / "tensors" / f"{stem}.pt")
                saved["file"] = os.path.relpath(saved["file"], result_path.parent.parent)
                doc["outputs"] = saved
            if trace is not None and doc["status"] in ("ok", "failed"):
                write_trace(ctx, trace)
        except Exception as exc:  # the evidence is extra; the measurement stands
            doc["warnings"].append(f"keeping outputs or trace failed: {type(exc).__name__}: {exc}")
        ctx.cleanup()
    if _gather_ranks(doc, ctx, result_path):
        write_result(result_path, doc)
    _shutdown_distributed()
    return 0


def _shutdown_distributed() -> None:
    if _rank_env()[1] > 1:
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()


def run_probe(out: Path) -> int:
    from suite.envinfo import environment

    atomic_write_json(out, environment())
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    worker_start = time.perf_counter()
    faulthandler.enable()  # a segfault still leaves a Python traceback in the cell's log
    parser = argparse.ArgumentParser(prog="python -m suite.worker")
    sub = parser.add_subparsers(dest="command", required=True)
    probe = sub.add_parser("probe")
    probe.add_argument("--out", required=True, type=Path)
    cell = sub.add_parser("cell")
    cell.add_argument("--spec", required=True)
    cell.add_argument("--result", required=True, type=Path)
    cell.add_argument("--run-id", required=True)
    cell.add_argument("--round", type=int, default=0)
    cell.add_argument("--path", action="append", default=[], help="prepend to sys.path (plugins)")
    cell.add_argument("--trace", type=Path, help="also save a Chrome trace of one more step")
    args = parser.parse_args(argv)
    if args.command == "probe":
        return run_probe(args.out)
    for entry in reversed(args.path):
        sys.path.insert(0, entry)
    spec = CellSpec.from_json(args.spec)
    return run_cell(spec, args.run_id, args.round, args.result, worker_start, args.trace)


if __name__ == "__main__":
    sys.exit(main())
