"""A workload part of which runs on the CPU: it says so (CellContext.fell_back), as an MPS cell's
record says so when torch falls back. The fallback gate's test plugin, on any backend."""

from __future__ import annotations

from typing import Any

from suite.workloads import CellContext, Param, Workload

MESSAGE = "aten::_fft_r2c has no kernel on this device: ran on the CPU"


class FallsBack(Workload):
    name = "falls_back"
    description = "a matmul on the device, an FFT on the CPU"
    params = (Param("n", (16,), (16,)),)
    sizes = {"smoke": {"n": 16}, "full": {"n": 64}}

    def run(self, ctx: CellContext) -> None:
        import torch

        ctx.seed(0)
        n = int(ctx.size["n"])
        x = torch.randn(n, n, device=ctx.device)

        def step() -> Any:
            y = x @ x
            return torch.fft.rfft(y.cpu()).abs().sum()

        ctx.fell_back(MESSAGE)
        ctx.measure(step, items_per_iter=1, unit="steps/s")
