"""A workload that takes its whole job down: it SIGKILLs the `ab` process that started it, as an
out-of-memory kill, a lost runner or hostile code would end a CI job, so that the job reports no
result for its cells. The aggregate must then say which job did not report, never adopt."""

from __future__ import annotations

import os
import signal
from pathlib import Path

from suite.workloads import CellContext, Workload


def _ab_ancestor() -> int | None:
    """The nearest ancestor process running `suite ab`."""
    pid = os.getppid()
    while pid > 1:
        proc = Path("/proc") / str(pid)
        argv = (proc / "cmdline").read_bytes().split(b"\0")
        if b"suite" in b" ".join(argv) and b"ab" in argv:
            return pid
        pid = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
    return None


class KillJob(Workload):
    name = "kill_job"
    description = "SIGKILLs the ab process of its job"
    sizes = {"smoke": {}, "full": {}}

    def run(self, ctx: CellContext) -> None:
        target = _ab_ancestor()
        if target is None:
            raise RuntimeError("no ab process above this worker")
        os.kill(target, signal.SIGKILL)
