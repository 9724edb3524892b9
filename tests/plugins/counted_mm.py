"""A step whose instructions a test plants: a small MLP-like step, plus one more matmul when
EXTRA_MM_VAR is set (a wrapper script sets it for the candidate side only)."""

from __future__ import annotations

import os

from suite.workloads import CellContext, Workload

EXTRA_MM_VAR = "TORCH_MATRIX_TEST_EXTRA_MM"


class CountedMm(Workload):
    name = "counted_mm"
    sizes = {"smoke": {"n": 160}, "full": {"n": 512}}

    def run(self, ctx: CellContext) -> None:
        import torch

        ctx.seed(0)
        n = int(ctx.size["n"])
        a, b = torch.randn(n, n), torch.randn(n, n)
        extra = os.environ.get(EXTRA_MM_VAR) == "1"

        def step() -> torch.Tensor:
            out = torch.relu(a @ b) + a
            if extra:
                out = out @ b  # the planted work: one more GEMM per step
            return out

        ctx.measure(step, items_per_iter=n)
