"""A team's training step whose optimizer a test breaks on one side: a .pth file in the candidate's
venv sets TM_PLANTED_LR_SCALE, as a torch whose SGD update went wrong would. The forward pass at
the seeded start is the same on both sides, so a one-step accuracy check passes; only the loss
curve of ten steps shows the regression."""

from __future__ import annotations

import os
from typing import Any

from suite.workloads import CellContext, Param, Workload

STEPS = 10


def _curve(torch: Any, dtype: Any, scale: float) -> tuple[list[float], Any, Any]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 4)
    ).to(dtype)
    x = torch.randn(64, 16).to(dtype)  # the same draws in either dtype
    y = torch.randint(0, 4, (64,))
    opt = torch.optim.SGD(model.parameters(), lr=0.5 * scale)
    first = model(x).detach()
    losses = []
    for _ in range(STEPS):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        losses.append(float(loss))
    return losses, first, model


class PlantedTrain(Workload):
    name = "planted_train"
    params = (Param("steps", (STEPS,), (STEPS,)),)
    sizes = {"smoke": {"width": 16}, "full": {"width": 16}}

    def run(self, ctx: CellContext) -> None:
        import torch

        scale = float(os.environ.get("TM_PLANTED_LR_SCALE", "1"))
        losses, first, model = _curve(torch, torch.float32, scale)
        reference, truth, _ = _curve(torch, torch.float64, 1.0)
        ctx.loss_curve(losses, reference=reference)
        ctx.model(model, config={"layers": [16, 32, 4], "activation": "tanh", "lr": 0.5})
        ctx.check_accuracy(first, first, truth, reference_name="the same forward")
        x = torch.randn(64, 16)
        ctx.measure(lambda: model(x), items_per_iter=64)
