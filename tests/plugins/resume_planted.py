"""A workload for the resume tests: it can hold (sleep) at a chosen point of the A/B, so a test
can kill the A/B there instead of racing it.

The point is named by place, not by order: the run folder the record goes to (baseline,
candidate, rehearsal) and its round, read from the worker's own command line. A count of
worker starts would shift when a disturbed round runs again."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from suite.workloads import CellContext, Workload

HOLD_DIR = "TORCH_MATRIX_TEST_HOLD_DIR"  # where the holding worker says so
HOLD_AT = "TORCH_MATRIX_TEST_HOLD_AT"  # FOLDER:ROUND, e.g. candidate:2


def _place(argv: list[str]) -> str | None:
    """FOLDER:ROUND of this worker's record, from its `--result` and `--round` arguments."""
    try:
        result = Path(argv[argv.index("--result") + 1])
        round_no = int(argv[argv.index("--round") + 1])
    except (ValueError, IndexError):
        return None
    return f"{result.parent.parent.name}:{round_no}"  # FOLDER/cells/CELL.json


def _first(folder: Path) -> bool:
    """Whether this is the first worker at the point (O_EXCL): a repeat of it does not hold."""
    try:
        os.close(os.open(folder / "claimed", os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return False
    return True


class Counted(Workload):
    """A tiny matmul; with HOLD_DIR set, the worker at HOLD_AT writes `holding` and sleeps."""

    name = "counted"
    sizes = {"smoke": {}, "full": {}}

    def run(self, ctx: CellContext) -> None:
        import torch

        folder = os.environ.get(HOLD_DIR)
        if folder and _place(sys.argv) == os.environ.get(HOLD_AT) and _first(Path(folder)):
            (Path(folder) / "holding").touch()
            time.sleep(600)
        a = torch.randn(16, 16, device=ctx.device)
        ctx.measure(lambda: a @ a, items_per_iter=16)
