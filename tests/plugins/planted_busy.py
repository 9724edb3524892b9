"""A step that a test disturbs on purpose: in a round named by a marker file, a busy process
shares the worker's one CPU while the step is timed. The first side to run that round takes the
marker, so the round's repeat runs undisturbed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from suite.workloads import CellContext, Workload

MARKERS_VAR = "TORCH_MATRIX_TEST_BUSY_ROUNDS"


def _round() -> int:
    argv = sys.argv
    return int(argv[argv.index("--round") + 1]) if "--round" in argv else 0


class PlantedBusy(Workload):
    name = "planted_busy"
    sizes = {"smoke": {"n": 96}, "full": {"n": 256}}

    def run(self, ctx: CellContext) -> None:
        import torch

        ctx.seed(0)
        # One CPU for the worker and the busy process alike, whatever the machine has.
        cpu = min(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {cpu})
        torch.set_num_threads(1)
        n = int(ctx.size["n"])
        a, b = torch.randn(n, n), torch.randn(n, n)
        marker = Path(os.environ.get(MARKERS_VAR, "/nonexistent")) / f"r{_round()}"
        busy = None
        try:
            marker.unlink()  # only one process takes a round's marker
        except OSError:
            pass
        else:
            spin = (
                f"import os; os.sched_setaffinity(0, {{{cpu}}}); print(flush=True)\nwhile 1: pass"
            )
            busy = subprocess.Popen([sys.executable, "-c", spin], stdout=subprocess.PIPE)
            assert busy.stdout is not None
            busy.stdout.readline()  # spinning from here on
        try:
            ctx.measure(lambda: torch.relu(a @ b), items_per_iter=n)
        finally:
            if busy is not None:
                busy.kill()
                busy.wait()
