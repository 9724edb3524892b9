"""Planted distributed workloads: two ranks over gloo; one well-behaved, one crashing, one hanging."""

from __future__ import annotations

import ctypes
import time
from typing import Any

from suite.workloads import CellContext, Param, Workload
from suite.workloads.fsdp2 import Fsdp2


class TwoRanks(Workload):
    def ranks(self, params: Any, profile: str) -> int:
        return 2


class AllReduce(TwoRanks):
    name = "all_reduce_ok"

    def run(self, ctx: CellContext) -> None:
        import torch
        import torch.distributed as dist

        x = torch.ones(1024, device=ctx.device) * (ctx.rank + 1)

        def step() -> None:
            y = x.clone()
            dist.all_reduce(y)

        ctx.measure(step, items_per_iter=x.numel())
        y = x.clone()
        dist.all_reduce(y)
        ctx.rank_metric("sum", float(y[0]))
        ctx.metric("world_size", ctx.world_size)


class RankCrash(TwoRanks):
    name = "rank_crash"

    def run(self, ctx: CellContext) -> None:
        import torch.distributed as dist

        dist.barrier()
        if ctx.rank == 1:
            ctypes.string_at(0)
        dist.barrier()


class RankHang(TwoRanks):
    name = "rank_hang"

    def run(self, ctx: CellContext) -> None:
        if ctx.rank == 1:
            time.sleep(3600)
        import torch.distributed as dist

        dist.barrier()


class RankRaises(TwoRanks):
    """Rank 1 raises while rank 0 waits in a collective it will never finish."""

    name = "rank_raises"

    def run(self, ctx: CellContext) -> None:
        import torch.distributed as dist

        if ctx.rank == 1:
            raise ValueError("planted: rank 1 gives up")
        dist.barrier()


class Hold(Workload):
    """A distributed cell that, once every rank is in, says so on its output and keeps its
    ranks talking (an all_reduce every 50 ms) for `seconds`: long enough to kill a node's
    agent or pull its cable while it runs. Rank 0 then measures one all_reduce."""

    name = "hold"
    distributed = True
    params = (Param("seconds", (30, 300), (30,)),)

    def ranks(self, params: Any, profile: str) -> int:
        return 2

    def run(self, ctx: CellContext) -> None:
        import torch
        import torch.distributed as dist

        x = torch.ones(16)
        dist.all_reduce(x)
        print(f"holding on rank {ctx.rank}", flush=True)
        end = time.monotonic() + float(ctx.params["seconds"])
        while time.monotonic() < end:
            dist.all_reduce(x)
            time.sleep(0.05)
        ctx.measure(lambda: dist.all_reduce(x), items_per_iter=16)


class Lopsided(TwoRanks):
    """`lopsided: true`: rank 1 holds three times rank 0's tensor in its step and sleeps 50 ms
    after its all_reduce, as a rank with a bigger shard on a slower host would; rank 0's own
    step is the same either way."""

    name = "lopsided"
    distributed = True
    params = (Param("lopsided", (False, True), (False, True)),)

    def run(self, ctx: CellContext) -> None:
        import torch
        import torch.distributed as dist

        heavy = bool(ctx.params["lopsided"]) and ctx.rank == 1
        n = 1 << 20

        talk = torch.ones(16)

        def step() -> None:
            held = torch.ones(3 * n if heavy else n)
            # Not a view of `held`: the collective's work may keep its tensor alive past the
            # step, and then several steps' `held` at once (a peak that did not repeat).
            dist.all_reduce(talk)
            if heavy:
                time.sleep(0.05)
            del held

        ctx.measure(step, items_per_iter=16)


class BlockingFsdp2(Fsdp2):
    """FSDP2 training with a planted collective no compute hides: a blocking all-reduce after
    each Linear (the forward waits for it every layer), of 16 MiB, as a layer's activations
    of a real model would be (this MLP's are 32 KiB, too little to tell from noise; 4 MiB was
    told from it alone, not always beside another test on two cores)."""

    name = "fsdp2_blocking"

    def prepare(self, model: Any, ctx: CellContext) -> None:
        import torch
        import torch.distributed as dist
        from torch import nn

        buffer = torch.zeros(1 << 22, device=ctx.device)  # stays zero, however often summed

        def block(module: Any, inputs: Any, output: Any) -> None:
            dist.all_reduce(buffer)  # synchronous: nothing runs beside it

        for layer in model:
            if isinstance(layer, nn.Linear):
                layer.register_forward_hook(block)
