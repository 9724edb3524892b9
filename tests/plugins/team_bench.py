"""A team's own workload, as a file plugin kept outside any run directory: a small
convolutional block (conv, GroupNorm, GELU) checked against float64 and timed.

The image A/B tests copy this file into a folder of their own, so a container can only see it
through the mount the suite derives for it. `TORCH_MATRIX_TEAM_BENCH_FAIL_ON=<torch version prefix>` makes
the cell raise under that torch, a planted failure for the reproduce line to rewrite.
"""

from __future__ import annotations

import os
from typing import Any

from suite.workloads import CellContext, Param, Workload

FAIL_VAR = "TORCH_MATRIX_TEAM_BENCH_FAIL_ON"


class TeamBench(Workload):
    name = "team_bench"
    description = "conv + GroupNorm + GELU block, vs float64"
    params = (Param("channels", (8, 16), (8,)),)
    sizes = {"smoke": {"batch": 4, "hw": 16}, "full": {"batch": 32, "hw": 64}}

    def run(self, ctx: CellContext) -> None:
        import torch

        fail_on = os.environ.get(FAIL_VAR)
        if fail_on and torch.__version__.startswith(fail_on):
            raise RuntimeError(f"planted failure under torch {torch.__version__}")
        ctx.seed(0)
        c, b, hw = int(ctx.params["channels"]), int(ctx.size["batch"]), int(ctx.size["hw"])
        block = torch.nn.Sequential(
            torch.nn.Conv2d(c, c, 3, padding=1), torch.nn.GroupNorm(2, c), torch.nn.GELU()
        ).to(ctx.device)
        x = torch.randn(b, c, hw, hw, device=ctx.device)

        def step() -> Any:
            with torch.no_grad():
                return block(x)

        ctx.measure(step, items_per_iter=b, unit="images/s")
        out = step()
        with torch.no_grad():
            fp64 = block.double()(x.double())
        ctx.check_accuracy(out, fp64.float(), fp64, reference_name="fp64")
        ctx.save_outputs({"out": out})
