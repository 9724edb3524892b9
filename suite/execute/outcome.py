"""What the ranks of a distributed cell said, read back from their output (shared by a cell on
one node, suite/execute/cell.py, and on several, suite/execute/multinode.py), and the worker's
own arguments."""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path

from suite.core.records import FAILURE_MODES, FailureMode, Status
from suite.core.spec import CellSpec
from suite.core.wire import PART_MARK, heard

# How much of a distributed cell's log is read for its ranks' parts and torchrun's summary.
LOG_READ_LIMIT = 1 << 20


_TORCHRUN_FAILURE = re.compile(
    r"rank\s*:\s*(\d+)[^\n]*\n\s*exitcode\s*:\s*(-?\d+)[^\n]*?(?:\((SIG[A-Z]+)\))?\s*$",
    re.MULTILINE,
)


def torchrun_deaths(log_text: str) -> str:
    """Which ranks torchrun saw die, from its failure summary (rank : N / exitcode : -11)."""
    deaths = [
        f"rank {rank} died ({sig or f'exit code {code}'})"
        for rank, code, sig in _TORCHRUN_FAILURE.findall(log_text)
        if sig != "SIGTERM"  # ranks torchrun itself stopped after the first death
    ]
    return "; ".join(dict.fromkeys(deaths))


# A rank that raised says why in its part (a marked line of its output, suite/core/wire.py); its
# status becomes the cell's.
_PART_MODES: dict[Status, FailureMode] = {
    "failed": "exception",
    "unsupported": "unsupported",
    "oom": "oom",
    "skipped": "unavailable",
}


def rank_failures(
    texts: Sequence[str], run_id: str, node_names: Sequence[str] = ()
) -> tuple[str, str | None, str | None]:
    """What the ranks of a distributed cell said before it ended (their parts, on their
    output: one text per node), and the status and failure mode the first rank that raised
    reported. A part of another run (an old log) is not this cell's."""
    said = []
    status = mode = None
    for i, text in enumerate(texts):
        where = f" on {node_names[i]}" if i < len(node_names) else ""
        for data in heard(text, PART_MARK):
            if data.get("run_id") != run_id or data.get("status") == "ok":
                continue
            rank, failure = data.get("rank"), data.get("failure")
            said.append(f"rank {rank}{where} {data.get('status')}: {failure}")
            if status is None:
                status, mode = data.get("status"), data.get("mode")
    return "; ".join(said), status, mode


def rank_outcome(
    said: str, raised: str | None, raised_mode: str | None
) -> tuple[Status, FailureMode] | None:
    """The status and mode the first rank that raised gives the cell; None if none did. What
    a part says is read, not trusted: a status or mode outside the vocabulary would make a
    record the schema refuses."""
    part = next((s for s in _PART_MODES if s == raised), None)
    if part is None:
        return None
    return part, next((m for m in FAILURE_MODES if m == raised_mode), _PART_MODES[part])


def worker_call(spec: CellSpec, result: Path, run_id: str, round_no: int) -> list[str]:
    """The worker's own arguments: after `python -m suite.worker`, here or under torchrun."""
    return [
        "cell",
        "--spec", spec.to_json(),
        "--result", str(result),
        "--run-id", run_id,
        "--round", str(round_no),
        "--path", os.getcwd(),
    ]  # fmt: skip
