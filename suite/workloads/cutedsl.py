"""A kernel written in CuTe DSL (NVIDIA CUTLASS's Python DSL, package `nvidia-cutlass-dsl`),
checked against the torch op it replaces and timed beside it. A prototype-lane workload: its
row never pushes a decision past `isolate`, in whatever lane a matrix puts it.

The kernel is an elementwise add over a 2-D tensor, one element per thread, compiled once with
`cute.compile` and called on the cell's tensors through DLPack. Without the package, or
without a CUDA GPU, the cell is `skipped` with what to install or where to run it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from suite.workloads._timing import synced_median_s
from suite.workloads.base import CellContext, Param, Skip, Workload

if TYPE_CHECKING:
    import torch

INSTALL_HINT = "pip install 'torch-matrix[cutedsl]' (or: pip install nvidia-cutlass-dsl)"
THREADS = 256
TIMING_ITERS = 50


def _import_cute() -> Any:
    try:
        import cutlass.cute as cute
    except ImportError as exc:
        raise Skip(f"CuTe DSL is not installed ({exc}); {INSTALL_HINT}") from None
    return cute


def build_add(cute: Any) -> Callable[..., Any]:
    """The host function: launch one thread per element of the (rows, cols) tensors."""

    @cute.kernel  # type: ignore[untyped-decorator]
    def add_kernel(g_a: Any, g_b: Any, g_c: Any) -> None:
        tidx, _, _ = cute.arch.thread_idx()
        bidx, _, _ = cute.arch.block_idx()
        bdim, _, _ = cute.arch.block_dim()
        i = bidx * bdim + tidx
        _, cols = g_a.shape
        row, col = i // cols, i % cols
        g_c[row, col] = g_a[row, col] + g_b[row, col]

    @cute.jit  # type: ignore[untyped-decorator]
    def add(m_a: Any, m_b: Any, m_c: Any) -> None:
        rows, cols = m_a.shape
        grid = ((rows * cols) // THREADS, 1, 1)
        add_kernel(m_a, m_b, m_c).launch(grid=grid, block=(THREADS, 1, 1))

    host: Callable[..., Any] = add
    return host


class CuteDslAdd(Workload):
    name = "cutedsl"
    description = "an elementwise add written in CuTe DSL, against torch.add (prototype lane)"
    prototype = True
    params = (Param("dtype", ("fp32", "fp16"), ("fp32",)),)
    # rows * cols must be a multiple of THREADS: the grid covers the tensor exactly.
    sizes = {"smoke": {"rows": 1024, "cols": 1024}, "full": {"rows": 8192, "cols": 8192}}
    throughput_unit = "elements/s"
    size_tag_format = "{rows}x{cols}"

    def run(self, ctx: CellContext) -> None:
        import torch

        if ctx.backend.device_type != "cuda" or torch.version.cuda is None:
            raise Skip(
                f"CuTe DSL kernels run on NVIDIA GPUs; this cell ran on {ctx.backend.name}. "
                f"On a CUDA machine: {INSTALL_HINT}"
            )
        cute = _import_cute()
        from cutlass.cute.runtime import from_dlpack

        ctx.seed(0)
        rows, cols = int(ctx.size["rows"]), int(ctx.size["cols"])
        dtype = ctx.dtype()
        a = torch.randn(rows, cols).to(ctx.device, dtype)
        b = torch.randn(rows, cols).to(ctx.device, dtype)
        c = torch.empty_like(a)
        views = [from_dlpack(t, assumed_align=16) for t in (a, b, c)]
        start = time.perf_counter()
        compiled = cute.compile(build_add(cute), *views)
        ctx.metric("compile_s", time.perf_counter() - start, "s")

        def step() -> torch.Tensor:
            compiled(*views)
            return c

        ctx.measure(step, items_per_iter=rows * cols, unit=self.throughput_unit)
        torch_p50 = synced_median_s(lambda: torch.add(a, b, out=c), ctx.backend.sync, TIMING_ITERS)
        cute_p50 = synced_median_s(step, ctx.backend.sync, TIMING_ITERS)
        ctx.metric("torch_add_p50_s", torch_p50, "s")
        ctx.metric("cute_add_p50_s", cute_p50, "s")
        ctx.metric("speedup_vs_torch", torch_p50 / cute_p50 if cute_p50 > 0 else None, "x")
        step()
        result = c.clone()
        reference = torch.add(a, b)
        truth = a.double().cpu() + b.double().cpu()
        ctx.check_accuracy(result, reference, truth, reference_name="torch.add", label="sum")
