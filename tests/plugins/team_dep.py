"""A team's workload that needs a package of its own beyond torch (as a model plugin needs
transformers): the module tm_team_dep, which a test puts in one side's environment only."""

from __future__ import annotations

from suite.workloads import CellContext, Param, Workload


class TeamDep(Workload):
    name = "team_dep"
    params = (Param("n", (8,), (8,)),)
    sizes = {"smoke": {"scale": 1}, "full": {"scale": 1}}

    def run(self, ctx: CellContext) -> None:
        import tm_team_dep  # the team's own dependency: absent from one side
        import torch

        ctx.seed(0)
        n = int(ctx.params["n"]) * int(tm_team_dep.SCALE)
        a = torch.randn(n, n, device=ctx.device)
        ctx.measure(lambda: a @ a, items_per_iter=n)
