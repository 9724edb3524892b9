"""A team's model that compiles and exports, with a regression a test plants on one side: a .pth
file in the candidate's venv sets TM_PLANTED_COMPILE, as a torch whose dynamo broke the graph
and whose export refused the model would. It uses the documented interface only (ctx.explain,
ctx.export_path, ctx.measure(compiled=True)), and has two models: a row each."""

from __future__ import annotations

import os
from typing import Any

from suite.workloads import CellContext, Param, Workload


def _planted() -> bool:
    return os.environ.get("TM_PLANTED_COMPILE") == "1"


class PlantedCompile(Workload):
    name = "planted_compile"
    params = (Param("model", ("narrow", "wide"), ("narrow", "wide")),)
    sizes = {"smoke": {"batch": 4}, "full": {"batch": 4}}

    def run(self, ctx: CellContext) -> None:
        import torch

        ctx.seed(0)
        width = 8 if ctx.params["model"] == "narrow" else 32
        model = torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.ReLU())
        ctx.model(model, config={"width": width})
        x = torch.randn(int(ctx.size["batch"]), width)

        def forward(inp: Any) -> Any:
            out = model(inp)
            if _planted():
                torch._dynamo.graph_break()  # the planted break: two graphs instead of one
            return out * 2

        with torch.no_grad():
            ctx.explain(forward, x)

        class Exported(torch.nn.Module):
            def forward(self, inp: Any) -> Any:
                out = model(inp)
                if _planted() and out.sum() > 0:  # data-dependent: export refuses it
                    return out
                return out * 2

        with ctx.export_path("torch_export") as attempt:
            program = torch.export.export(Exported(), (x,))
            attempt.max_abs_error = float((program.module()(x) - forward(x)).abs().max())

        # Dynamo's graphs are what the gates read; Inductor's kernels would only cost compile time.
        compiled = torch.compile(forward, backend="eager")
        with torch.no_grad():
            ctx.measure(lambda: compiled(x), items_per_iter=x.shape[0], compiled=True)
