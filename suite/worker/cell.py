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
import sys
import time
import traceback
import types
import warnings
from collections.abc import Sequence
from pathlib import Path

from suite.core.records import FailureMode, HarnessRecord, ImageRecord, Result, Status
from suite.core.results import atomic_write_json, base_result, utc_now, write_result
from suite.core.spec import CellSpec
from suite.worker.backends import Backend, get, mps_fallback_enabled
from suite.worker.context import WorkerContext, fill_measurements, save_outputs, write_trace
from suite.worker.counting import Counted, keep_priority, steps_to_count
from suite.worker.envinfo import imported_distributions
from suite.worker.forensics import start_watchdog
from suite.worker.measure import (
    timer_overhead_s,
)
from suite.worker.ranks import (
    fail_rank,
    gather_ranks,
    hand_over,
    init_distributed,
    nodes,
    rank_env,
    shutdown_distributed,
    start_heartbeat,
    where,
)
from suite.workloads.base import Skip, Unsupported, Workload

_OOM_MARKERS = ("out of memory", "can't allocate memory", "cannot allocate memory")
_MPS_FALLBACK_MARKER = "fall back to run on the CPU"


def lacks_torch_api(exc: BaseException) -> bool:
    """An older (or differently built) torch without a module or attribute a workload uses:
    `import torch.nn.attention.flex_attention` failing, or `torch.nn.LinearCrossEntropyLoss`
    absent. That torch cannot run the cell; it is not a failure of the cell."""
    if isinstance(exc, ModuleNotFoundError):
        return (exc.name or "").split(".")[0] == "torch"
    if isinstance(exc, ImportError):  # `from torch.x import name` where name is absent
        return (exc.name or "").split(".")[0] == "torch"
    if isinstance(exc, AttributeError):
        owner = getattr(exc, "obj", None)
        return isinstance(owner, types.ModuleType) and owner.__name__.split(".")[0] == "torch"
    return False


def lacks_package(exc: BaseException) -> str | None:
    """The package a workload imports that this side does not have: a module other than torch,
    imported by the workload's own code (not by torch's: a torch whose own dependency is missing
    is that torch's failure). The side's environment lacks it; no torch regressed."""
    if not isinstance(exc, ModuleNotFoundError) or not exc.name:
        return None
    root = exc.name.split(".")[0]
    if root == "torch":
        return None
    importer = ""
    for frame, _ in traceback.walk_tb(exc.__traceback__):
        if not frame.f_code.co_filename.startswith("<frozen importlib"):
            importer = frame.f_code.co_filename
    torch_dir = (
        os.path.dirname(sys.modules["torch"].__file__ or "") if "torch" in sys.modules else ""
    )
    if torch_dir and importer.startswith(torch_dir + os.sep):
        return None
    return root


def _classify(exc: BaseException) -> tuple[Status, FailureMode]:
    """(status, failure mode) for an exception raised by a workload."""
    import torch

    if isinstance(exc, (Unsupported, NotImplementedError)) or lacks_torch_api(exc):
        return "unsupported", "unsupported"
    if isinstance(exc, Skip) or lacks_package(exc):
        return "skipped", "dependency"
    if isinstance(exc, (MemoryError, torch.OutOfMemoryError)):
        return "oom", "oom"
    if isinstance(exc, RuntimeError) and any(m in str(exc).lower() for m in _OOM_MARKERS):
        return "oom", "oom"
    return "failed", "exception"


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
    _say_world_cleared(doc, spec)
    import_s = _import_torch_s()
    _record_torch_and_image(doc)
    backend = get(spec.backend)
    t_workload = time.perf_counter()
    ctx, caught = _run_workload(spec, backend, doc, result_path)
    workload_s = time.perf_counter() - t_workload
    if ctx is not None:
        fill_measurements(doc, ctx)
        _fail_on_correctness(doc)
    _record_fallback(doc, ctx, caught)
    doc["finished_at"] = utc_now()
    doc["wall_s"] = time.perf_counter() - worker_start
    doc["harness"] = _harness_figures(ctx, worker_start, import_s, workload_s)
    if ctx is not None:
        _keep_evidence(doc, ctx, round_no, result_path, trace)
        ctx.cleanup()
    if gather_ranks(doc, ctx.rank_metrics if ctx is not None else {}):
        write_result(result_path, doc)
        hand_over(doc, result_path)
    shutdown_distributed()
    return 0


def _say_world_cleared(doc: Result, spec: CellSpec) -> None:
    """A cell started from inside another job's world (a Slurm step, a Kubeflow pod) got none
    of it: say what was left out, and in which world the cell ran instead."""
    cleared = [n for n in os.environ.get("TORCH_MATRIX_CLEARED_WORLD", "").split(",") if n]
    if not cleared:
        return
    ran = (
        f"in its own world of {spec.world_size} ranks"
        if spec.world_size > 1
        else "alone, as rank 0 of a world of 1"
    )
    doc["warnings"].append(
        f"this cell ran {ran}: the inherited {', '.join(cleared)} were not passed to it "
        "(only the launcher of its own nodes places a cell in a world)"
    )


def _import_torch_s() -> float:
    """Import torch and the workloads; return the seconds it took (the harness's import_s)."""
    t_import = time.perf_counter()
    import torch  # noqa: F401

    from suite.workloads import resolve  # noqa: F401

    return time.perf_counter() - t_import


def _record_torch_and_image(doc: Result) -> None:
    import torch

    from suite.core.host import IMAGE_DIGEST_VAR, IMAGE_REF_VAR

    doc["torch"] = {
        "version": torch.__version__,
        "git_version": getattr(torch.version, "git_version", None),
    }
    digest = os.environ.get(IMAGE_DIGEST_VAR)
    if digest:
        image: ImageRecord = {"digest": digest}
        reference = os.environ.get(IMAGE_REF_VAR)
        if reference:
            image["reference"] = reference
        doc["image"] = image


def _run_workload(
    spec: CellSpec, backend: Backend, doc: Result, result_path: Path
) -> tuple[WorkerContext | None, list[warnings.WarningMessage]]:
    """Probe the backend and run the workload on it, recording in DOC its source and what
    stopped it. Returns its context (None where it never got one) and the warnings it raised."""
    from suite.workloads import resolve

    ctx: WorkerContext | None = None
    caught: list[warnings.WarningMessage] = []
    before = set(sys.modules)
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
            if backend.entry.falls_back:
                doc["fallback"] = {
                    "enabled": mps_fallback_enabled(),
                    "happened": False,
                    "messages": [],
                }
            ctx = _make_context(spec, backend, resolved.workload)
            ctx.fault = resolved.workload.fault(ctx.params, spec.profile)
            if ctx.world_size > 1 or spec.distributed:
                init_distributed(backend)
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                resolved.workload.run(ctx)
    except Counted:
        pass  # a counting worker is done once its step is counted
    except BaseException as exc:
        if isinstance(exc, KeyboardInterrupt):
            raise
        _record_failure(doc, exc)
        if rank_env()[1] > 1:
            # The other ranks may wait in a collective this rank will never join: leave now,
            # and torchrun stops them. The parent reads this part for the record.
            fail_rank(doc, ctx.rank_metrics if ctx is not None else {})
    doc["imports"] = imported_distributions(before)
    return ctx, caught


def _make_context(spec: CellSpec, backend: Backend, workload: Workload) -> WorkerContext:
    """The cell's context at its profile's sizes, or its count sizes in a counting worker."""
    size = dict(workload.sizes.get(spec.profile, {}))
    counting = steps_to_count() is not None
    smaller = dict(workload.count_sizes.get(spec.profile, {})) if counting else {}
    size.update(smaller)
    ctx = WorkerContext(spec, backend, size)
    ctx.count_size = smaller
    return ctx


def _record_failure(doc: Result, exc: BaseException) -> None:
    import torch

    status, mode = _classify(exc)
    message = str(exc) or type(exc).__name__
    if lacks_torch_api(exc):
        message = f"torch {torch.__version__} lacks what this cell uses: {message}"
    elif package := lacks_package(exc):
        message = (
            f"this side lacks the package {package!r} that the workload imports ({message}): "
            f"give the side its dependencies (--with REQ or --requirements FILE)"
        )
    doc["status"] = status
    doc["failure"] = {
        "mode": mode,
        "message": message,
        "exception_type": f"{type(exc).__module__}.{type(exc).__qualname__}",
        "signal": None,
        "exit_code": None,
        "stderr_tail": "".join(traceback.format_exception(exc))[-4000:],
    }


def _fail_on_correctness(doc: Result) -> None:
    """A cell that ran but failed an accuracy check is failed."""
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


def _record_fallback(
    doc: Result, ctx: WorkerContext | None, caught: list[warnings.WarningMessage]
) -> None:
    """Whether any of the cell ran on the CPU: MPS's fallback warnings, or what it declared."""
    fallback_msgs = [str(w.message) for w in caught if _MPS_FALLBACK_MARKER in str(w.message)]
    if doc["fallback"] is None and ctx is not None and ctx.fallbacks:
        # A workload said some of it ran on the CPU (CellContext.fell_back), on any backend.
        doc["fallback"] = {"enabled": True, "happened": False, "messages": []}
    declared = ctx.fallbacks if ctx is not None else []
    if doc["fallback"] is not None and (fallback_msgs or declared):
        doc["fallback"]["happened"] = True
        doc["fallback"]["messages"] = [*declared, *fallback_msgs][:20]


def _harness_figures(
    ctx: WorkerContext | None, worker_start: float, import_s: float, workload_s: float
) -> HarnessRecord:
    return {
        "worker_wall_s": time.perf_counter() - worker_start,
        "import_s": import_s,
        "workload_s": workload_s,
        "timed_s": ctx.timing.timed_s if ctx is not None and ctx.timing is not None else 0.0,
        "timer_overhead_s": timer_overhead_s(repeats=2000),
        "forked": os.environ.get("TORCH_MATRIX_FORKED") == "1",
    }


def _keep_evidence(
    doc: Result, ctx: WorkerContext, round_no: int, result_path: Path, trace: Path | None
) -> None:
    """Save the cell's outputs beside the results and write its trace, when asked for."""
    # Keeping outputs and traces is evidence on top of the measurement: if it breaks, the
    # record says so and keeps the measurement.
    if nodes() > 1 and (ctx.outputs or trace is not None):
        # They would stay on rank 0's node; only the record travels back to the coordinator.
        doc["warnings"].append(
            "the checked outputs and trace of a cell on several nodes are not kept: drift is "
            "compared on its one-node cells"
        )
        return
    try:
        if ctx.outputs and round_no == 0 and ctx.rank == 0:  # one copy per side is enough
            # Tensors above suite.worker.context.OUTPUT_CAP_ELEMENTS are kept as a fixed
            # strided sample: drift needs the same elements on both sides, not all of them.
            stem = result_path.name.removesuffix(".json")
            saved = save_outputs(ctx, result_path.parent.parent / "tensors" / f"{stem}.pt")
            saved["file"] = os.path.relpath(saved["file"], result_path.parent.parent)
            doc["outputs"] = saved
        if trace is not None and doc["status"] in ("ok", "failed"):
            write_trace(ctx, rank_trace(trace, ctx.rank, ctx.world_size))
    except Exception as exc:  # the evidence is extra; the measurement stands
        doc["warnings"].append(f"keeping outputs or trace failed: {type(exc).__name__}: {exc}")


def rank_trace(trace: Path, rank: int, world: int) -> Path:
    """One trace file per rank: rank 0's at the path asked for (x.trace.json), rank r's beside
    it (x.rank1.trace.json); one rank's timeline is not another's."""
    if world < 2 or rank == 0:
        return trace
    stem, dot, suffix = trace.name.partition(".trace")
    name = f"{stem}.rank{rank}.trace{suffix}" if dot else f"{trace.stem}.rank{rank}{trace.suffix}"
    return trace.with_name(name)


def run_probe(out: Path) -> int:
    from suite.worker.envinfo import environment

    atomic_write_json(out, environment())
    return 0


def _die_with_agent() -> None:
    """A rank ends when its torchrun agent does (torchrun starts each rank in a session of its
    own): a killed agent leaves no rank running on, as a node that went down would not."""
    if sys.platform.startswith("linux"):
        import ctypes
        import signal

        try:
            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        except OSError:
            return
        if os.getppid() == 1:  # the agent died before the call
            os._exit(1)


def main(argv: Sequence[str] | None = None) -> int:
    worker_start = time.perf_counter()
    faulthandler.enable()  # a segfault still leaves a Python traceback in the cell's log
    keep_priority()
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
    cell.add_argument("--trace", type=Path, help="also save a Chrome trace of five more steps")
    args = parser.parse_args(argv)
    if args.command == "probe":
        return run_probe(args.out)
    for entry in reversed(args.path):
        sys.path.insert(0, entry)
    spec = CellSpec.from_json(args.spec)
    if os.environ.get("LOCAL_RANK") is None:
        return run_cell(spec, args.run_id, args.round, args.result, worker_start, args.trace)
    # A rank torchrun started (never inherited).
    _die_with_agent()
    start_heartbeat()
    start_watchdog(args.run_id, rank_env()[0], where()["node"])
    code = run_cell(spec, args.run_id, args.round, args.result, worker_start, args.trace)
    # Record written, group destroyed: leave without the interpreter's teardown. Torch 2.14.1's
    # CUDA build with no driver aborts in a C++ destructor at exit after a profiled gloo
    # collective (5 runs in 14 of a torchrun script, none of 20 with this exit), and a rank dead
    # at exit has torchrun stop the others, rank 0 before its record is written.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    sys.exit(main())
