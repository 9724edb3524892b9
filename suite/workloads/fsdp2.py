"""The fsdp2 workload: a seeded MLP trained under FSDP2 (fully_shard) with AdamW, on every rank.

Times one training step; its loss curve (the mean over all ranks' batches, which every rank
computes) must match single-process training of the same model on the global batch, so the
averaged gradients are the same. Rank 0 alone checks, against that curve in fp32 and in fp64:
the curve is identical on every rank, and only rank 0 may record checked outputs (the worker
saves them to one file per cell). Communication wait comes from torch.profiler over a few more
steps: the self time of ranges that name a collective (FSDP::all_gather,
FSDP::post_backward_reduce, c10d, gloo and nccl ops; copy-in/out excluded), plus the device
time of nccl kernels on CUDA. The model and training helpers are shared with ``checkpoint``.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from suite.workloads.base import CellContext, Param, ParamValue, Unsupported, Workload
from suite.workloads.collectives import measure_in_lockstep

if TYPE_CHECKING:
    import torch
    from torch import nn

SIZES: dict[str, dict[str, Any]] = {
    # batch is per rank; the single-process reference trains on world_size * batch.
    "smoke": {"dim": 256, "layers": 4, "batch": 32, "steps": 10, "lr": 3e-3, "profile_steps": 3},
    "full": {"dim": 4096, "layers": 4, "batch": 64, "steps": 10, "lr": 1e-3, "profile_steps": 3},
}
WORLD_SIZE = 2
_COMM_NAMES = (
    "all_gather", "allgather", "reduce_scatter", "reducescatter", "all_reduce", "allreduce",
    "all_to_all", "alltoall", "broadcast", "post_backward_reduce", "record_param_comms",
    "gloo", "nccl", "c10d::",
)  # fmt: skip


def fully_shard_fn() -> Callable[..., Any]:
    """FSDP2's fully_shard (public since 2.6, under _composable before), or Unsupported."""
    import importlib

    import torch

    for module in ("torch.distributed.fsdp", "torch.distributed._composable.fsdp"):
        try:
            found: Callable[..., Any] | None = getattr(
                importlib.import_module(module), "fully_shard", None
            )
        except ImportError:
            found = None
        if found is not None:
            return found
    raise Unsupported(f"torch {torch.__version__} has no FSDP2 fully_shard")


def build_model(size: Mapping[str, Any], seed: int) -> nn.Sequential:
    """Linear layers with ReLU between, initialised from seed on the CPU in fp32, whatever
    the global RNG: every rank and every reference starts from the same weights."""
    import torch
    from torch import nn

    dim = int(size["dim"])
    layers: list[nn.Module] = []
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        for i in range(int(size["layers"])):
            if i:
                layers.append(nn.ReLU())
            layers.append(nn.Linear(dim, dim))
    return nn.Sequential(*layers)


def shard(
    model: nn.Sequential, device: torch.device, reshard_after_forward: bool = True
) -> nn.Sequential:
    """Each Linear its own FSDP2 unit, then the root (the usual per-block wrapping).
    reshard_after_forward=False keeps each unit's gathered parameters from the forward for the
    backward: less communication, more memory."""
    from torch import nn

    fully_shard = fully_shard_fn()
    model.to(device)
    for layer in model:
        if isinstance(layer, nn.Linear):
            fully_shard(layer, reshard_after_forward=reshard_after_forward)
    fully_shard(model, reshard_after_forward=reshard_after_forward)
    return model


def make_data(
    size: Mapping[str, Any], world: int, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """Global batches [steps, world * batch, dim] and targets of a tanh teacher, so the loss
    falls. Own generator: the data do not depend on the global RNG."""
    import torch

    gen = torch.Generator().manual_seed(1234)
    dim, steps = int(size["dim"]), int(size["steps"])
    teacher = torch.randn(dim, dim, generator=gen) / dim**0.5
    xs = torch.randn(steps, world * int(size["batch"]), dim, generator=gen)
    return xs.to(device), torch.tanh(xs @ teacher).to(device)


def local_batch(xs: torch.Tensor, rank: int, world: int) -> torch.Tensor:
    per_rank = xs.shape[1] // world
    return xs[:, rank * per_rank : (rank + 1) * per_rank]


def trainer(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    xs: torch.Tensor,
    ys: torch.Tensor,
    world: int = 1,
) -> Callable[[int], torch.Tensor]:
    """train_step(i) on batch i, returning the loss; with world > 1, the mean over the ranks."""
    import torch.distributed as dist
    import torch.nn.functional as F

    def train_step(i: int) -> torch.Tensor:
        optimizer.zero_grad(set_to_none=True)
        loss = F.mse_loss(model(xs[i]), ys[i])
        loss.backward()
        optimizer.step()
        loss = loss.detach()
        if world > 1:
            loss = loss.clone()
            dist.all_reduce(loss)  # gloo has no AVG
            loss = loss / world
        return loss

    return train_step


def train(step: Callable[[int], torch.Tensor], indices: Sequence[int]) -> torch.Tensor:
    import torch

    return torch.stack([step(i) for i in indices])


def timed_training(
    ctx: CellContext, train_step: Callable[[int], torch.Tensor], steps: int, batch: int
) -> Callable[[], None]:
    """Time TRAIN_STEP over the cell's batches in turn, in lockstep over the ranks (throughput
    in samples of the whole BATCH), and return the step for whatever else measures it."""
    order = itertools.cycle(range(steps))

    def step() -> None:
        train_step(next(order))
        ctx.backend.sync()

    measure_in_lockstep(ctx, step, items_per_iter=batch, unit="samples/s")
    return step


def single_process_curve(
    initial: Mapping[str, torch.Tensor],
    size: Mapping[str, Any],
    xs: torch.Tensor,
    ys: torch.Tensor,
    dtype: torch.dtype,
    indices: Sequence[int],
) -> torch.Tensor:
    """The same training, unsharded, in one process, on the global batches, in dtype."""
    import torch

    model = build_model(size, seed=0)
    model.load_state_dict(initial)
    model.to(xs.device, dtype)
    optimizer = torch.optim.AdamW(model.parameters(), lr=float(size["lr"]))
    step = trainer(model, optimizer, xs.to(dtype), ys.to(dtype))
    return train(step, indices)


def local_bytes(tensors: Sequence[Any]) -> int:
    """Bytes this rank holds of (possibly sharded DTensor) tensors."""
    total = 0
    for t in tensors:
        local = t.to_local() if hasattr(t, "to_local") else t
        total += local.numel() * local.element_size()
    return total


def _is_comm(name: str) -> bool:
    low = name.lower()
    return "copy" not in low and any(n in low for n in _COMM_NAMES)


def _union(spans: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    merged: list[tuple[float, float]] = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def _length(spans: Sequence[tuple[float, float]]) -> float:
    return sum(end - start for start, end in spans)


def _overlap(a: Sequence[tuple[float, float]], b: Sequence[tuple[float, float]]) -> float:
    """Time two unions of disjoint, sorted spans share (a sweep over both)."""
    i = j = 0
    shared = 0.0
    while i < len(a) and j < len(b):
        shared += max(0.0, min(a[i][1], b[j][1]) - max(a[i][0], b[j][0]))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return shared


def exposed_us(events: Sequence[Any]) -> float:
    """Communication on the profiler's timeline that no compute overlapped, in microseconds:
    the union of communication spans (any thread; NCCL kernels on a GPU) minus its overlap with
    the union of compute spans (aten ops outside any communication range of their own thread,
    and on a GPU the other kernels, which overlap an NCCL kernel only from another stream).
    Copy-in/out and waits inside a communication range are communication."""
    comm: list[tuple[float, float]] = []
    comm_by_thread: dict[Any, list[tuple[float, float]]] = {}
    compute: list[tuple[float, float]] = []
    candidates = []
    for event in events:
        span = (float(event.time_range.start), float(event.time_range.end))
        kernel = "cuda" in str(getattr(event, "device_type", "")).lower()
        if _is_comm(event.name):
            comm.append(span)
            if not kernel:
                comm_by_thread.setdefault(event.thread, []).append(span)
        elif kernel:
            compute.append(span)
        elif event.name.startswith("aten::") and "wait" not in event.name.lower():
            candidates.append((event.thread, span))
    own = {thread: _union(spans) for thread, spans in comm_by_thread.items()}
    for thread, span in candidates:
        inside = any(s <= span[0] and span[1] <= e for s, e in own.get(thread, ()))
        if not inside:
            compute.append(span)
    comm_spans = _union(comm)
    return _length(comm_spans) - _overlap(comm_spans, _union(compute))


def comm_wait(ctx: CellContext, step: Callable[[], Any], steps: int) -> tuple[float, float, float]:
    """(communication seconds, exposed communication seconds, wall seconds) per step over
    steps profiled steps."""
    import torch.distributed as dist
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU]
    if ctx.device.type == "cuda":
        activities.append(ProfilerActivity.CUDA)
    dist.barrier()
    with profile(activities=activities) as prof:
        start = time.perf_counter()
        for _ in range(steps):
            step()
        wall = time.perf_counter() - start
    comm_us = 0.0
    for event in prof.key_averages():
        if _is_comm(event.key):
            comm_us += event.self_cpu_time_total
            if "nccl" in event.key.lower():
                comm_us += getattr(event, "self_device_time_total", 0.0)
    exposed = exposed_us(prof.events())
    return comm_us / 1e6 / steps, exposed / 1e6 / steps, wall / steps


class Fsdp2(Workload):
    name = "fsdp2"
    description = (
        "FSDP2 (fully_shard) MLP training with AdamW: step time, comm wait, loss vs 1 rank"
    )
    sizes = SIZES
    params = (
        Param(
            "reshard_after_forward",
            (True, False),
            (True,),
            help="FSDP2's overlap setting: free gathered parameters after the forward (true)",
        ),
    )
    throughput_unit = "samples/s"

    distributed = True

    def ranks(self, params: Mapping[str, ParamValue], profile: str) -> int:
        return WORLD_SIZE

    def size_tag(self, params: Mapping[str, ParamValue], profile: str) -> str | None:
        return f"d{SIZES[profile]['dim']}"

    def prepare(self, model: nn.Sequential, ctx: CellContext) -> None:
        """Called on the sharded model before training: a plugin's hook (nothing here)."""

    def run(self, ctx: CellContext) -> None:
        import torch
        import torch.distributed as dist

        size, steps = ctx.size, int(ctx.size["steps"])
        rank, world = ctx.rank, ctx.world_size
        fully_shard_fn()  # Unsupported before anything is built
        xs, ys = make_data(size, world, ctx.device)
        model = build_model(size, seed=0)
        initial = {k: v.detach().clone() for k, v in model.state_dict().items()}
        shard(model, ctx.device, bool(ctx.params.get("reshard_after_forward", True)))
        self.prepare(model, ctx)
        optimizer = torch.optim.AdamW(model.parameters(), lr=float(size["lr"]))
        x_local, y_local = local_batch(xs, rank, world), local_batch(ys, rank, world)
        curve = train(trainer(model, optimizer, x_local, y_local, world), range(steps))

        # Timed without the loss all-reduce that the curve needs: a training step alone.
        step = timed_training(ctx, trainer(model, optimizer, x_local, y_local), steps, xs.shape[1])
        wait_s, exposed_s, wall_s = comm_wait(ctx, step, int(size["profile_steps"]))
        ctx.rank_metric("comm_wait_s_per_step", wait_s, "s")
        ctx.rank_metric("comm_exposed_s_per_step", exposed_s, "s")
        # The row's figure is the worst rank's: the step waits for the slowest.
        every: list[Any] = [None] * world
        dist.all_gather_object(every, exposed_s)
        ctx.metric("comm_exposed_s_per_step", max(every), "s")
        ctx.rank_metric("local_param_bytes", local_bytes(list(model.parameters())), "B")
        ctx.metric("comm_wait_s_per_step", wait_s, "s")
        ctx.metric("comm_share", wait_s / wall_s if wall_s > 0 else None)
        ctx.metric("profiled_step_s", wall_s, "s")
        ctx.metric("initial_loss", float(curve[0]))
        ctx.metric("loss_after_n_steps", float(curve[-1]))
        ctx.metric("steps", steps)
        ctx.metric("world_size", world)
        if rank == 0:
            reference = single_process_curve(initial, size, xs, ys, torch.float32, range(steps))
            truth = single_process_curve(initial, size, xs, ys, torch.float64, range(steps))
            ctx.check_accuracy(
                curve,
                reference,
                truth,
                reference_name="single-process training",
                dtype="fp32",
                label="loss_curve",
            )
