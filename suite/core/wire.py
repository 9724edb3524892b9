"""What a distributed cell's ranks say to the coordinator over their output, which every
launcher carries back (a local pipe, ssh, srun, kubectl logs) with no shared filesystem: each
rank that fails its part, global rank 0 the cell's record, each one a marked line of JSON; and
the heartbeat datagrams that tell which node stopped answering."""

from __future__ import annotations

import json
import os
from typing import Any

PART_MARK = "@@torch-matrix-part "
RECORD_MARK = "@@torch-matrix-record "
STACKS_MARK = "@@torch-matrix-stacks "  # a rank's threads, shortly before its cell's timeout

# Set by the coordinator on each node's agent; torchrun passes them on to its ranks.
NODE_VAR = "TORCH_MATRIX_NODE"  # the launcher's index of the node (0 first)
NODES_VAR = "TORCH_MATRIX_NODES"  # how many nodes the cell has
BEAT_VAR = "TORCH_MATRIX_BEAT"  # host:port of the coordinator's heartbeat listener
CELL_VAR = "TORCH_MATRIX_RDZV_ID"  # the cell's rendezvous id, which every heartbeat carries
BEAT_INTERVAL_S = 1.0
# Set by the parent on every distributed cell: when (seconds since the epoch) it stops the cell.
DEADLINE_VAR = "TORCH_MATRIX_DEADLINE"
DURABLE_VAR = "TORCH_MATRIX_DURABLE_DIR"  # a folder that outlives a restart of the cell's group


def say(mark: str, doc: dict[str, Any]) -> None:
    """Write one marked line in a single write: lines of ranks sharing an output stay whole."""
    line = "\n" + mark + json.dumps(doc, separators=(",", ":"), default=str) + "\n"
    data = line.encode("utf-8")
    while data:
        data = data[os.write(1, data) :]


def heard(text: str, mark: str) -> list[dict[str, Any]]:
    """Every whole marked document in TEXT, in order; a line cut short is not one."""
    found = []
    for line in text.splitlines():
        at = line.find(mark)
        if at < 0:
            continue
        try:
            doc = json.loads(line[at + len(mark) :])
        except ValueError:
            continue
        if isinstance(doc, dict):
            found.append(doc)
    return found
