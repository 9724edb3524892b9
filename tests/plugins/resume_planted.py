"""A workload for the resume tests: it can hold (sleep) at a chosen worker start, so a test
can kill the A/B at an exact point instead of racing it."""

from __future__ import annotations

import os
import time
from pathlib import Path

from suite.workloads import CellContext, Workload

HOLD_DIR = "TORCH_MATRIX_TEST_HOLD_DIR"  # where workers count themselves
HOLD_AT = "TORCH_MATRIX_TEST_HOLD_AT"  # the worker (0-based, in start order) that holds


def _my_number(folder: Path) -> int:
    """This worker's place in start order: the first free n of n0, n1, ... (O_EXCL)."""
    n = 0
    while True:
        try:
            os.close(os.open(folder / f"n{n}", os.O_CREAT | os.O_EXCL | os.O_WRONLY))
            return n
        except FileExistsError:
            n += 1


class Counted(Workload):
    """A tiny matmul; with HOLD_DIR set, worker number HOLD_AT writes `holding` and sleeps."""

    name = "counted"
    sizes = {"smoke": {}, "full": {}}

    def run(self, ctx: CellContext) -> None:
        import torch

        folder = os.environ.get(HOLD_DIR)
        if folder and _my_number(Path(folder)) == int(os.environ.get(HOLD_AT, "-1")):
            (Path(folder) / "holding").touch()
            time.sleep(600)
        a = torch.randn(16, 16, device=ctx.device)
        ctx.measure(lambda: a @ a, items_per_iter=16)
