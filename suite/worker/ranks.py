"""The ranks of a distributed cell: their environment, their process group, where each ran,
and the part each rank gives global rank 0 to fold into the cell's record.

Nothing here goes through a filesystem: the parts travel by a collective, and what must reach
the coordinator (a failing rank's part, the record of a cell on several nodes) is a marked line
on the rank's output (suite/core/wire.py), which every launcher carries back.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
import threading
from pathlib import Path
from typing import Any

from suite.core.records import Result
from suite.core.stats import timing_of
from suite.core.wire import (
    BEAT_INTERVAL_S,
    BEAT_VAR,
    CELL_VAR,
    NODE_VAR,
    NODES_VAR,
    PART_MARK,
    RECORD_MARK,
    say,
)
from suite.worker.backends import Backend
from suite.worker.worst_rank import fold_worst


def rank_env() -> tuple[int, int, int]:
    """(rank, world size, local rank) as torchrun sets them; a plain cell is rank 0 of 1."""
    return (
        int(os.environ.get("RANK", "0")),
        int(os.environ.get("WORLD_SIZE", "1")),
        int(os.environ.get("LOCAL_RANK", "0")),
    )


def _int_env(name: str) -> int | None:
    value = os.environ.get(name, "")
    return int(value) if value.isdigit() else None


def nodes() -> int:
    """How many nodes this cell's world spans (1 unless a coordinator placed it on several)."""
    return _int_env(NODES_VAR) or 1


def _address() -> str | None:
    """The address this host reaches the rendezvous from: the local end of a route to it."""
    master, port = os.environ.get("MASTER_ADDR"), _int_env("MASTER_PORT") or 29500
    if not master:
        return None
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect((master, port))  # a datagram socket: nothing is sent
            return str(probe.getsockname()[0])
    except OSError:
        return None


def where() -> dict[str, Any]:
    """Where this rank ran: the launcher's node, torchrun's node rank, its local rank, host
    name and address."""
    return {
        "node": _int_env(NODE_VAR),
        "node_rank": _int_env("GROUP_RANK"),
        "local_rank": _int_env("LOCAL_RANK"),
        "host": socket.gethostname(),
        "address": _address(),
    }


def start_heartbeat() -> None:
    """Tell the coordinator every second that this rank's node still answers (a datagram to
    its listener, over the same network as the ranks): the node whose beats stop is the one
    a timeout names. Nothing where the coordinator listens for none."""
    target = os.environ.get(BEAT_VAR, "")
    host, _, port = target.rpartition(":")
    if not host or not port.isdigit():
        return
    beat = json.dumps(
        {"cell": os.environ.get(CELL_VAR), "node": _int_env(NODE_VAR), "rank": rank_env()[0]}
    ).encode()

    def loop() -> None:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as out:
            while True:
                with contextlib.suppress(OSError):
                    out.sendto(beat, (host, int(port)))
                threading.Event().wait(BEAT_INTERVAL_S)

    threading.Thread(target=loop, name="torch-matrix-heartbeat", daemon=True).start()


def init_distributed(backend: Backend) -> None:
    """The default process group. After torchrun restarted the group (a cell whose fault
    killed a rank), in a store of the attempt's own: the agent's store still holds the dead
    group's gloo addresses, and a restarted rank that reads them connects to a port no one
    listens on ('Connection refused', torch 2.13 and 2.14 alike)."""
    import datetime

    import torch.distributed as dist

    timeout = datetime.timedelta(seconds=300)
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") or 0)
    if attempt > 0 and os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True":
        rank, world, _ = rank_env()
        agent = dist.TCPStore(  # type: ignore[attr-defined]
            os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), is_master=False,
            timeout=timeout,
        )  # fmt: skip
        store = dist.PrefixStore(f"torch-matrix/attempt{attempt}", agent)  # type: ignore[attr-defined]
        dist.init_process_group(
            backend.entry.process_group, store=store, rank=rank, world_size=world, timeout=timeout
        )
        return
    dist.init_process_group(backend.entry.process_group, timeout=timeout)


def rank_part(doc: Result, metrics: dict[str, Any], rank: int) -> dict[str, Any]:
    summary = timing_of(doc)
    failure, memory, timing = doc.get("failure"), doc.get("memory"), doc.get("timing")
    return {
        "rank": rank,
        "status": doc["status"],
        "failure": failure["message"] if failure else None,
        "mode": failure["mode"] if failure else None,
        "p50_s": summary["p50"] if summary else None,
        "peak_bytes": memory.get("peak_bytes") if memory else None,
        "samples_s": list(timing["samples_s"]) if timing else None,
        "calls_per_sample": timing.get("calls_per_sample") if timing else None,
        "metrics": metrics,
        **where(),
    }


def fail_rank(doc: Result, metrics: dict[str, Any]) -> None:
    """Leave at once, saying on this rank's output why: the others may wait in a collective
    this rank will never join, and torchrun stops them; the coordinator reads this part."""
    rank = rank_env()[0]
    sys.stdout.flush()
    sys.stderr.flush()
    part = rank_part(doc, metrics, rank)
    part.pop("samples_s")
    part.pop("calls_per_sample")
    say(PART_MARK, {"run_id": doc["run_id"], **part})
    os._exit(1)


def gather_ranks(doc: Result, metrics: dict[str, Any]) -> bool:
    """Every rank gives its part to global rank 0, which folds them into the record, by a
    collective: no rank reads another's disk. True on rank 0."""
    rank, world, _ = rank_env()
    if world == 1:
        return True
    import torch.distributed as dist

    part = rank_part(doc, metrics, rank)
    parts: list[Any] = [None] * world
    if dist.is_initialized():
        dist.gather_object(part, parts if rank == 0 else None, dst=0)
    else:
        parts[rank] = part
    if rank != 0:
        return False
    parts = [p if p is not None else {"rank": r, "status": "missing"} for r, p in enumerate(parts)]
    fold_worst(doc, parts)
    for p in parts:  # folded into the record's timing; each rank keeps its median
        p.pop("samples_s", None)
        p.pop("calls_per_sample", None)
    doc["ranks"] = parts
    bad = [p for p in parts if p["status"] not in ("ok", doc["status"])]
    if bad and doc["status"] == "ok":
        doc["status"] = "failed"
        doc["failure"] = {
            "mode": "exception",
            "message": f"rank {bad[0]['rank']}: {bad[0].get('failure')}",
        }
    return True


def hand_over(doc: Result, result_path: Path) -> None:
    """Global rank 0 of a cell on several nodes says its record on its output: the file it
    also writes is on its own node's disk, which the coordinator need not share."""
    if nodes() > 1:
        sys.stdout.flush()
        say(RECORD_MARK, dict(doc))


def over_ranks(value: float) -> list[float]:
    """Every rank's VALUE, in rank order, on every rank (a collective of the default group)."""
    import torch.distributed as dist

    values: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(values, value)
    return [float(v) for v in values]


def shutdown_distributed() -> None:
    if "torch.distributed" in sys.modules:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()
