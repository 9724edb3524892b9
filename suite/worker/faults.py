"""Faults the harness injects into a distributed cell, never the workload: a rank killed with
SIGKILL at a step the workload's fault() names, on the group's first attempt only, so that
torchrun (--max-restarts from the cell's spec) restarts the group and the workload resumes
from its checkpoint. The time of the kill is kept in the cell's durable folder, which outlives
the restart, for the recovery time the resumed run measures (kill to its first step)."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

from suite.core.wire import DURABLE_VAR
from suite.workloads.base import Fault

KILLED_FILE = "killed_at"


def durable_dir() -> Path | None:
    """The folder the parent keeps for this cell across its group's restarts, if any."""
    folder = os.environ.get(DURABLE_VAR)
    return Path(folder) if folder else None


def attempt() -> int:
    return int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") or 0)


def kill_here(fault: Fault | None, rank: int, step: int, folder: Path | None) -> None:
    """SIGKILL this process where FAULT says, on the first attempt: no handler runs, no file
    is closed, as when a host's kernel kills a rank. The time is written (and synced) first."""
    if fault is None or attempt() > 0 or fault.rank != rank or fault.step != step:
        return
    if folder is not None:
        folder.mkdir(parents=True, exist_ok=True)
        with open(folder / KILLED_FILE, "w", encoding="utf-8") as out:
            out.write(f"{time.time():.6f}\n")
            out.flush()
            os.fsync(out.fileno())
    sys.stdout.flush()
    sys.stderr.flush()
    os.kill(os.getpid(), signal.SIGKILL)


def killed_at(folder: Path | None) -> float | None:
    """When the harness killed a rank of this cell (on this node's clock), if it did."""
    if folder is None or attempt() == 0:
        return None
    try:
        return float((folder / KILLED_FILE).read_text(encoding="utf-8").strip())
    except (OSError, ValueError):
        return None
