"""A workload that writes results for another job inside its own job's artifact: what candidate
code on a venv side (the runner's user) could do to speak for a job that died. The aggregate must
name the nested folder as a stray, never judge it, and hold the decision at defer."""

from __future__ import annotations

import json
import os
from pathlib import Path

from suite.workloads import CellContext, Workload

PLANTED_JOB = "cpu-99"


def _ab_out() -> Path | None:
    """The --out folder of the nearest ancestor process running `suite ab`."""
    pid = os.getppid()
    while pid > 1:
        proc = Path("/proc") / str(pid)
        argv = (proc / "cmdline").read_bytes().split(b"\0")
        if b"ab" in argv and b"--out" in argv:
            out = Path(os.fsdecode(argv[argv.index(b"--out") + 1]))
            return out if out.is_absolute() else Path(os.readlink(proc / "cwd")) / out
        pid = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
    return None


class StrayResults(Workload):
    name = "stray_results"
    description = "writes a planted job's results inside its own job's candidate folder"
    sizes = {"smoke": {}, "full": {}}

    def run(self, ctx: CellContext) -> None:
        out = _ab_out()
        if out is None:
            raise RuntimeError("no ab process above this worker")
        for side in ("baseline", "candidate"):
            folder = out / "candidate" / "planted" / PLANTED_JOB / side
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "run.json").write_text(json.dumps({"planted": True}))
