"""The compile workload: what torch.compile costs and does to a small model, not just its speed.

One cell compiles the shared transformer block (or its MLP half) and records: compile time with a
fresh inductor cache (``compile_cold_s``) and again from a second process sharing that cache
(``compile_warm_s``); dynamo's graph breaks and their reasons; how many graphs a realistic set of
sequence lengths compiles under the chosen dynamic-shape policy (``unique_graphs``,
``recompiles``, ``recompile_reasons``); steady-state throughput at one sequence length with the
compiled/eager ratio beside it; and accuracy of the compiled output against eager, with a
float64 eager run as truth.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from suite.workloads import _block
from suite.workloads._timing import synced_median_s
from suite.workloads.base import CellContext, Param, Unsupported, Workload

if TYPE_CHECKING:
    import torch
    from torch import nn

Model = Callable[["torch.Tensor"], "torch.Tensor"]

CACHE_ENV = "TORCHINDUCTOR_CACHE_DIR"
SEQ_DIM = 1


# torch.compile modes; reduce-overhead records CUDA graphs, so it needs a CUDA device.
COMPILE_MODES = ("default", "reduce-overhead")


def _compile(model: nn.Module, dynamic: str, mode: str = "default") -> Model:
    """torch.compile under one of the dynamic-shape policies named by the 'dynamic' param, in
    one of torch.compile's modes ('reduce-overhead' captures CUDA graphs)."""
    import torch

    if dynamic == "static":
        return torch.compile(model, dynamic=False, mode=mode)
    # 'mark_dynamic' compiles the same way as 'default'; the marks on the inputs make the change.
    return torch.compile(model, mode=mode)


def _input(
    size: Mapping[str, Any], seq: int, dynamic: str, device: torch.device | str
) -> torch.Tensor:
    """The activations for one sequence length, marked dynamic in 'mark_dynamic' mode. A mark
    is an attribute of the tensor, so marking each input once covers every call made with it."""
    import torch

    x = _block.make_input(size, seq, device=device)
    if dynamic == "mark_dynamic":
        torch._dynamo.mark_dynamic(x, SEQ_DIM)
    return x


def _first_call_s(fn: Model, x: torch.Tensor, sync: Callable[[], None]) -> float:
    import torch

    with torch.no_grad():
        sync()
        start = time.perf_counter()
        fn(x)
        sync()
    return time.perf_counter() - start


def _fresh_cache_dir() -> tuple[str, bool]:
    """The cell's inductor cache directory, and whether this cell created it (and removes it).

    The runner gives every cell its own; outside the runner, or if torch already settled on its
    shared per-user default, a temporary one keeps the cold compile cold.
    """
    current = os.environ.get(CACHE_ENV)
    shared_default: str | None = None
    try:
        from torch._inductor.runtime.cache_dir_utils import default_cache_dir

        shared_default = os.path.abspath(default_cache_dir())
    except ImportError:  # a torch without the helper: only an unset variable means 'no cache'
        pass
    if current and os.path.abspath(current) != shared_default:
        return current, False
    created = tempfile.mkdtemp(prefix="torch-matrix-inductor-")
    os.environ[CACHE_ENV] = created
    return created, True


def _warm_compile_s(
    workload: Compile, ctx: CellContext, cache_dir: str, seq: int, dynamic: str
) -> tuple[float | None, str | None]:
    """First-call time of the same compile in a fresh process sharing the cache directory.

    Returns (seconds, None) or (None, what went wrong): a warm-cache failure is a finding about
    the cache, not a reason to lose the rest of the cell.
    """
    cls = type(workload)
    module = sys.modules.get(cls.__module__)
    job = {
        "module": cls.__module__,
        "file": getattr(module, "__file__", None),
        "qualname": cls.__qualname__,
        "model": str(ctx.params["model"]),
        "size": dict(ctx.size),
        "seq": seq,
        "dynamic": dynamic,
        "mode": str(ctx.params.get("mode", "default")),
        "backend": ctx.backend.name,
    }
    # The child must import what this worker imported, plugins added to sys.path included.
    env = {
        **os.environ,
        CACHE_ENV: cache_dir,
        "PYTHONPATH": os.pathsep.join(filter(None, sys.path)),
    }
    code = "import sys; from suite.workloads.compile import warm_main; sys.exit(warm_main())"
    timeout = float(ctx.size.get("warm_timeout_s", 300))
    try:
        proc = subprocess.run(
            [sys.executable, "-c", code, json.dumps(job)],
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return None, f"warm-cache compile did not finish within {timeout:g}s"
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith("{") and proc.returncode == 0:
            return float(json.loads(line)["first_call_s"]), None
    return None, f"warm-cache compile exited {proc.returncode}: {proc.stderr[-1500:].strip()}"


def warm_main(argv: Sequence[str] | None = None) -> int:
    """Child side of _warm_compile_s: rebuild the model, compile, print the first-call time."""
    from suite.core.errors import WorkloadError
    from suite.worker.backends import get
    from suite.workloads import resolve

    job = json.loads((argv or sys.argv[1:])[0])
    refs = [f"{job['module']}:{job['qualname']}"]
    if job["file"]:
        refs.append(f"{job['file']}:{job['qualname']}")
    workload: Workload | None = None
    for ref in refs:
        try:
            workload = resolve(ref).workload
            break
        except WorkloadError:
            continue  # a file-loaded plugin has no importable module name; its file will do
    if not isinstance(workload, Compile):
        raise TypeError(f"none of {refs} names a compile workload")
    backend = get(job["backend"])
    model = workload.build_model(job["model"], job["size"], backend.device())
    x = _input(job["size"], int(job["seq"]), job["dynamic"], backend.device())
    seconds = _first_call_s(_compile(model, job["dynamic"], job["mode"]), x, backend.sync)
    print(json.dumps({"first_call_s": seconds}), flush=True)
    return 0


class Compile(_block.BlockModels, Workload):
    name = "compile"
    description = (
        "torch.compile of a transformer block: cold and warm-cache compile time, graph breaks, "
        "recompiles over a set of sequence lengths, speedup and accuracy against eager"
    )
    params = (
        Param("model", _block.MODELS, ("block",), help="transformer block, or its MLP half"),
        Param(
            "dynamic",
            ("default", "mark_dynamic", "static"),
            ("default", "mark_dynamic", "static"),
            help="torch.compile default; mark_dynamic on the sequence dim; dynamic=False",
        ),
        Param(
            "mode",
            COMPILE_MODES,
            ("default",),
            help="torch.compile mode; reduce-overhead replays CUDA graphs (CUDA only)",
        ),
    )
    sizes = {
        "smoke": {
            "dim": 64,
            "heads": 4,
            "batch": 2,
            # Each distinct graph costs seconds on a CPU: four lengths still show the policies
            # apart (static compiles four graphs, default two, mark_dynamic one).
            "seqs": (32, 48, 64, 128),
            "measure_seq": 64,
            "ratio_iters": 10,
            "warm_timeout_s": 120,
        },
        "full": {
            "dim": 1024,
            "heads": 16,
            "batch": 8,
            "seqs": (512, 1024, 1536, 2048, 4096),
            "measure_seq": 2048,
            "ratio_iters": 10,
            "warm_timeout_s": 300,
        },
    }
    throughput_unit = "tokens/s"
    size_tag_format = "d{dim}"

    def run(self, ctx: CellContext) -> None:
        mode = str(ctx.params.get("mode", "default"))  # a plugin's own params may lack it
        if mode == "reduce-overhead" and ctx.backend.device_type != "cuda":
            raise Unsupported(
                "torch.compile(mode='reduce-overhead') replays CUDA graphs; the "
                f"{ctx.backend.name} backend has none"
            )
        previous = os.environ.get(CACHE_ENV)
        cache_dir, owned = _fresh_cache_dir()
        try:
            self._run(ctx, cache_dir, mode)
        finally:
            if owned:  # leave the process's environment as it was
                shutil.rmtree(cache_dir, ignore_errors=True)
                if previous is None:
                    os.environ.pop(CACHE_ENV, None)
                else:
                    os.environ[CACHE_ENV] = previous

    def _run(self, ctx: CellContext, cache_dir: str, mode: str) -> None:
        import torch
        from torch._dynamo.utils import counters, guard_failures

        ctx.seed(0)
        size, sync = ctx.size, ctx.backend.sync
        dynamic, kind = str(ctx.params["dynamic"]), str(ctx.params["model"])
        seqs = [int(s) for s in size["seqs"]]
        measure_seq = int(size["measure_seq"])
        model = self.build_model(kind, size, ctx.device)
        inputs = {s: _input(size, s, dynamic, ctx.device) for s in [*seqs, measure_seq]}

        cold = _first_call_s(_compile(model, dynamic, mode), inputs[seqs[0]], sync)
        ctx.metric("compile_cold_s", cold, "s")
        warm, error = _warm_compile_s(self, ctx, cache_dir, seqs[0], dynamic)
        if error is None:
            ctx.metric("compile_warm_s", warm, "s")
        else:
            ctx.metric("compile_warm_error", error)
            ctx.warn(error)

        with torch.no_grad():
            ctx.explain(model, inputs[seqs[0]])  # graph_breaks, graph_count and their reasons

        # A clean dynamo state, so that only this sweep's graphs and guard failures are counted;
        # the on-disk cache stays warm, which spares recompiling the first length.
        torch._dynamo.reset()
        compiled = _compile(model, dynamic, mode)
        before = counters["stats"]["unique_graphs"]
        with torch.no_grad():
            compiled(inputs[seqs[0]])
            first = counters["stats"]["unique_graphs"] - before
            for s in seqs[1:]:
                compiled(inputs[s])
        unique = counters["stats"]["unique_graphs"] - before
        ctx.metric("seq_lengths", ",".join(str(s) for s in seqs))
        ctx.metric("unique_graphs", unique)
        # Graphs compiled for later lengths; equals unique_graphs - 1 for a model with no breaks.
        ctx.recompiles(unique - first, (r for rs in guard_failures.values() for r in rs))

        x = inputs[measure_seq]
        batch = int(size["batch"])

        def step() -> torch.Tensor:
            with torch.no_grad():
                return compiled(x)

        ctx.measure(
            step, items_per_iter=batch * measure_seq, unit=self.throughput_unit, compiled=True
        )
        # ctx.measure keeps its p50 to itself, so the ratio comes from one short loop run the
        # same way on both sides.
        iters = int(size["ratio_iters"])
        with torch.no_grad():
            compiled_p50 = synced_median_s(lambda: compiled(x), sync, iters)
            eager_p50 = synced_median_s(lambda: model(x), sync, iters)
        ctx.metric("compiled_p50_s", compiled_p50, "s")
        ctx.metric("eager_p50_s", eager_p50, "s")
        ctx.metric("speedup_vs_eager", eager_p50 / compiled_p50 if compiled_p50 > 0 else None, "x")

        with torch.no_grad():
            result, reference = compiled(x), model(x)
            truth = _block.fp64_copy(model)(x.detach().to("cpu", torch.float64))
        ctx.check_accuracy(result, reference, truth, reference_name="eager")
