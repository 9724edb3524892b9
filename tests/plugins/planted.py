"""Planted workloads for the harness tests: each misbehaves in one specific way."""

from __future__ import annotations

import ctypes
import os
import signal
import time

from suite.workloads import CellContext, Param, Workload


class Quick(Workload):
    """A tiny, well-behaved matmul with an accuracy check."""

    name = "quick"
    params = (Param("n", (8, 16, 32), (8, 16)),)
    sizes = {"smoke": {"scale": 1}, "full": {"scale": 4}}

    def run(self, ctx: CellContext) -> None:
        import torch

        ctx.seed(0)
        n = int(ctx.params["n"]) * int(ctx.size["scale"])
        a = torch.randn(n, n, device=ctx.device)
        ctx.measure(lambda: a @ a, items_per_iter=n)
        ctx.check_accuracy(
            a @ a,
            (a.double() @ a.double()).float(),
            a.double() @ a.double(),
            reference_name="fp64-rounded",
        )


class Segfault(Workload):
    name = "segfault"

    def run(self, ctx: CellContext) -> None:
        ctypes.string_at(0)


class Hang(Workload):
    name = "hang"

    def run(self, ctx: CellContext) -> None:
        time.sleep(3600)


class MemoryHog(Workload):
    """Allocates until the address-space limit refuses."""

    name = "memory_hog"

    def run(self, ctx: CellContext) -> None:
        hoard = []
        while True:
            hoard.append(bytearray(256 * 2**20))


class Raises(Workload):
    name = "raises"

    def run(self, ctx: CellContext) -> None:
        raise ValueError("planted failure: the workload raised")


class Unsupported(Workload):
    name = "not_here"

    def run(self, ctx: CellContext) -> None:
        raise NotImplementedError("planted: this backend has no kernel for that")


class SelfKill(Workload):
    name = "self_kill"

    def run(self, ctx: CellContext) -> None:
        os.kill(os.getpid(), signal.SIGABRT)
