"""A workload whose steady-state iteration allocates, touches and frees a known number of bytes."""

from __future__ import annotations

from typing import Any

from suite.workloads import CellContext, Param, Workload


class KnownAlloc(Workload):
    name = "known_alloc"
    params = (Param("mib", (64, 256, 1024), (64, 256, 1024)),)
    sizes = {"smoke": {}, "full": {}}

    def run(self, ctx: CellContext) -> None:
        import torch

        nbytes = int(ctx.params["mib"]) * 2**20

        def step() -> Any:
            block = torch.empty(nbytes, dtype=torch.uint8, device=ctx.device)
            block.fill_(1)  # touch every page so it is resident
            return int(block[::4096].sum())

        ctx.measure(step, items_per_iter=nbytes, unit="bytes/s")
        ctx.metric("expected_bytes", nbytes, "bytes")
