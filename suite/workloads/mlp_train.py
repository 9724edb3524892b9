"""The mlp_train workload: a small seeded MLP training loop, eager or compiled.

Times one training step (zero grad, forward, loss, backward, SGD-with-momentum step), then
restarts from the same initial weights and trains N steps. Correctness compares that N-step loss
trajectory with the same training done functionally (x @ W.T + b, hand-written momentum update)
in the same dtype, and in float64 as truth. Data is synthetic and made in code: no downloads.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from suite.workloads.base import CellContext, Param, Workload

if TYPE_CHECKING:
    import torch
    from torch import nn

LossFn = Callable[["torch.Tensor", "torch.Tensor"], "torch.Tensor"]


def _truth_device(device: torch.device) -> torch.device:
    """fp64 truth runs on the cell's device (the full profile is slow in fp64 on a CPU), except
    on MPS, which has no float64."""
    import torch

    return torch.device("cpu") if device.type == "mps" else device


def _model(size: Mapping[str, int], device: torch.device, dtype: torch.dtype) -> nn.Sequential:
    from torch import nn

    width = [size["in_features"], size["hidden"], size["hidden"], size["classes"]]
    layers: list[nn.Module] = []
    for i in range(len(width) - 1):
        if i:
            layers.append(nn.ReLU())
        layers.append(nn.Linear(width[i], width[i + 1], device=device, dtype=dtype))
    return nn.Sequential(*layers)


def _data(
    size: Mapping[str, int], device: torch.device, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """steps batches of inputs [steps, batch, in] and labels from a random linear teacher, so
    that the loss actually falls. Own generator: the data do not depend on the global RNG."""
    import torch

    gen = torch.Generator().manual_seed(1234)
    steps, batch, features = size["steps"], size["batch"], size["in_features"]
    teacher = torch.randn(features, size["classes"], generator=gen)
    xs = torch.randn(steps, batch, features, generator=gen)
    ys = (xs @ teacher).argmax(dim=-1)
    return xs.to(device, dtype), ys.to(device)


def _functional_losses(
    params0: Sequence[torch.Tensor],
    xs: torch.Tensor,
    ys: torch.Tensor,
    lr: float,
    momentum: float,
) -> torch.Tensor:
    """The same training spelled out: affine layers, log_softmax/gather loss, and SGD momentum
    (buf = momentum * buf + grad; p -= lr * buf, which is torch.optim.SGD's rule)."""
    import torch

    params = [p.detach().clone().requires_grad_() for p in params0]
    bufs = [torch.zeros_like(p) for p in params]
    losses = []
    for x, y in zip(xs, ys, strict=True):
        h = x
        for i in range(0, len(params), 2):
            if i:
                h = torch.relu(h)
            h = h @ params[i].T + params[i + 1]
        loss = -torch.log_softmax(h, dim=-1).gather(1, y[:, None]).mean()
        grads = torch.autograd.grad(loss, params)
        with torch.no_grad():
            for p, g, buf in zip(params, grads, bufs, strict=True):
                buf.mul_(momentum).add_(g)
                p.sub_(lr * buf)
        losses.append(loss.detach())
    return torch.stack(losses)


class MlpTrain(Workload):
    name = "mlp_train"
    description = "Seeded MLP training steps (SGD + momentum) on synthetic data, eager or compiled"
    params = (
        Param("mode", ("eager", "compiled"), ("eager",), help="compiled: torch.compile(loss fn)"),
        Param("dtype", ("fp32", "bf16"), ("fp32",)),
    )
    sizes = {
        "smoke": {
            "batch": 64,
            "in_features": 128,
            "hidden": 256,
            "classes": 10,
            "steps": 20,
            # High enough that the loss visibly falls within 20 steps (2.29 -> ~1.9).
            "lr": 0.2,
            "momentum": 0.9,
        },
        "full": {
            "batch": 4096,
            "in_features": 1024,
            "hidden": 4096,
            "classes": 100,
            "steps": 50,
            "lr": 0.1,
            "momentum": 0.9,
        },
    }
    count_sizes = {"smoke": {"steps": 4}, "full": {"steps": 4}}
    throughput_unit = "samples/s"
    size_tag_format = "b{batch}h{hidden}"

    def run(self, ctx: CellContext) -> None:
        import torch
        import torch.nn.functional as F

        ctx.seed(0)
        dims = {k: int(ctx.size[k]) for k in ("batch", "in_features", "hidden", "classes", "steps")}
        lr, momentum = float(ctx.size["lr"]), float(ctx.size["momentum"])
        dtype = ctx.dtype()
        compiled = ctx.params["mode"] == "compiled"

        model = _model(dims, ctx.device, dtype)
        initial = {k: v.detach().clone() for k, v in model.state_dict().items()}
        xs, ys = _data(dims, ctx.device, dtype)

        def forward_loss(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            return F.cross_entropy(model(x), y)

        loss_fn: LossFn = torch.compile(forward_loss) if compiled else forward_loss

        def trainer() -> Callable[[int], torch.Tensor]:
            optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum)

            def train_step(i: int) -> torch.Tensor:
                optimizer.zero_grad(set_to_none=True)
                loss = loss_fn(xs[i], ys[i])
                loss.backward()
                optimizer.step()
                return loss.detach()

            return train_step

        train_step = trainer()
        order = itertools.cycle(range(dims["steps"]))
        ctx.measure(
            lambda: train_step(next(order)),
            items_per_iter=dims["batch"],
            unit=self.throughput_unit,
            compiled=compiled,
        )

        # Restart from the same weights with fresh optimizer state; loading in place keeps the
        # parameters the compiled graph was traced with, so nothing is recompiled.
        ctx.seed(0)
        model.load_state_dict(initial)
        replay = trainer()
        result = torch.stack([replay(i) for i in range(dims["steps"])])
        ctx.metric("initial_loss", float(result[0]))
        ctx.metric("loss_after_n_steps", float(result[-1]))
        ctx.metric("steps", dims["steps"])

        params0 = list(initial.values())
        reference = _functional_losses(params0, xs, ys, lr, momentum)
        device64 = _truth_device(ctx.device)
        truth = _functional_losses(
            [p.to(device64, torch.float64) for p in params0],
            xs.to(device64, torch.float64),
            ys.to(device64),
            lr,
            momentum,
        )
        ctx.check_accuracy(
            result,
            reference,
            truth,
            reference_name=f"functional x @ W.T + b, manual SGD momentum ({ctx.params['dtype']})",
            label="loss_trajectory",
        )
