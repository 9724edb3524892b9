"""A team's workload that uses a library of its own beside torch, as a model plugin uses
transformers: tm_team_lib, which a test installs at another version on each side."""

from __future__ import annotations

from suite.workloads import CellContext, Param, Workload


class TeamLib(Workload):
    name = "team_lib"
    params = (Param("n", (8,), (8,)),)
    sizes = {"smoke": {"scale": 1}, "full": {"scale": 1}}

    def run(self, ctx: CellContext) -> None:
        import tm_team_lib  # the team's library: its version is part of the workload
        import torch

        ctx.seed(0)
        n = int(ctx.params["n"]) * int(tm_team_lib.SCALE)
        a = torch.randn(n, n, device=ctx.device)
        ctx.measure(lambda: a @ a, items_per_iter=n)
