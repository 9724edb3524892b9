"""Planted workloads for the fork server tests: each reports or does one thing about its process.

They talk to the test through ctx.metric (recorded in the result) or through a file named by
FORK_TEST_PIDFILE, for workers that never write a result.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time

from suite.workloads import CellContext, Workload

# Set on a module the fork server imported before forking: a second worker must not see it.
MARK = "_fork_test_marked_by"


def _write_pidfile(*values: int) -> None:
    path = os.environ["FORK_TEST_PIDFILE"]
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="ascii") as fh:
        fh.write(" ".join(str(v) for v in values))
    os.replace(tmp, path)


class Echo(Workload):
    """Records what the process it runs in looks like, after running one torch op."""

    name = "echo"

    def run(self, ctx: CellContext) -> None:
        import torch

        from suite import workloads as registry

        seen = getattr(registry, MARK, None)
        setattr(registry, MARK, os.getpid())
        cuda_ready = torch.cuda.is_initialized()
        a = torch.randn(64, 64)
        ctx.measure(lambda: a @ a, items_per_iter=64)
        ctx.metric("pid", os.getpid())
        ctx.metric("ppid", os.getppid())
        ctx.metric("pgid", os.getpgid(0))
        ctx.metric("seen_mark", seen)
        ctx.metric("cuda_initialized_at_start", cuda_ready)
        ctx.metric("cwd", os.getcwd())
        ctx.metric("value", os.environ.get("FORK_TEST_VALUE"))
        ctx.metric("pythonpath", os.environ.get("PYTHONPATH"))


class Hang(Workload):
    """Starts a grandchild when FORK_TEST_GRANDCHILD=1, says who it is, then never finishes."""

    name = "fork_hang"

    def run(self, ctx: CellContext) -> None:
        grandchild = 0
        if os.environ.get("FORK_TEST_GRANDCHILD") == "1":
            grandchild = subprocess.Popen(["sleep", "3600"]).pid
        _write_pidfile(os.getpid(), os.getppid(), grandchild)
        time.sleep(3600)


class SigKill(Workload):
    name = "sigkill"

    def run(self, ctx: CellContext) -> None:
        os.kill(os.getpid(), signal.SIGKILL)
