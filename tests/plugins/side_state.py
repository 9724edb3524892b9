"""A side whose state slows later cells: on the side whose environment names a marker folder
(SIDE_STATE_VAR, set by a wrapper script for the candidate only), the `warm` case marks the
process it was forked from, and the `hit` case, forked later from a marked process, does twice
the work per step. Inside a matrix the candidate's fork server serves `warm` before `hit` in
every round, so `hit` is slower there in every round; alone, with a fresh fork server, it is
not. The harness must not call that a regression of the pin."""

from __future__ import annotations

import os
from pathlib import Path

from suite.workloads import CellContext, Param, Workload

SIDE_STATE_VAR = "TORCH_MATRIX_TEST_SIDE_STATE"


def _marker() -> Path | None:
    folder = os.environ.get(SIDE_STATE_VAR)
    return Path(folder) / f"served-{os.getppid()}" if folder else None


class SideState(Workload):
    name = "side_state"
    params = (Param("case", ("warm", "hit"), ("warm", "hit")),)
    sizes = {"smoke": {"n": 192}, "full": {"n": 512}}

    def run(self, ctx: CellContext) -> None:
        import torch

        ctx.seed(0)
        n = int(ctx.size["n"])
        a, b = torch.randn(n, n), torch.randn(n, n)
        marker = _marker()
        if ctx.params["case"] == "warm" and marker is not None:
            marker.touch()  # what this process's parent served is now part of its state
        slowed = ctx.params["case"] == "hit" and marker is not None and marker.exists()

        def step() -> torch.Tensor:
            out = torch.relu(a @ b)
            if slowed:
                out = torch.relu(out @ b)  # the planted state: one more GEMM per step
            return out

        ctx.measure(step, items_per_iter=n)
