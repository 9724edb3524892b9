"""A workload whose amount of work is set from outside: TORCH_MATRIX_BENCH_EXTRA percent more
matrix multiplications per step. The cell id does not change with it, so two sides of an A/B
differ in work alone."""

from __future__ import annotations

import os
from typing import Any

from suite.workloads import CellContext, Param, Workload

EXTRA_VAR = "TORCH_MATRIX_BENCH_EXTRA"


class ScaledWork(Workload):
    name = "scaled_work"
    params = (Param("trial", tuple(range(1000)), (0,)),)
    sizes = {"smoke": {"n": 64, "reps": 200}, "full": {"n": 256, "reps": 400}}

    def run(self, ctx: CellContext) -> None:
        import torch

        ctx.seed(int(ctx.params["trial"]))
        extra = float(os.environ.get(EXTRA_VAR, "0"))
        reps = round(int(ctx.size["reps"]) * (1 + extra / 100))
        n = int(ctx.size["n"])
        a = torch.randn(n, n, device=ctx.device)

        def step() -> Any:
            x = a
            for _ in range(reps):
                x = torch.tanh(x @ a)
            return x

        ctx.measure(step, items_per_iter=reps, unit="matmul/s")
        ctx.metric("reps", reps)
