"""The ranks of a distributed cell: their environment, their process group, and the part
each rank writes for rank 0 to fold into the cell's record."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from suite.core.records import Result
from suite.core.results import atomic_write_json
from suite.core.stats import timing_of
from suite.worker.backends import Backend


def rank_env() -> tuple[int, int, int]:
    """(rank, world size, local rank) as torchrun sets them; a plain cell is rank 0 of 1."""
    return (
        int(os.environ.get("RANK", "0")),
        int(os.environ.get("WORLD_SIZE", "1")),
        int(os.environ.get("LOCAL_RANK", "0")),
    )


def rank_part_path(result_path: Path, rank: int) -> Path:
    return result_path.with_name(f".{result_path.name}.rank{rank}.json")


def init_distributed(backend: Backend) -> None:
    import datetime

    import torch.distributed as dist

    dist.init_process_group(backend.entry.process_group, timeout=datetime.timedelta(seconds=300))


def rank_part(doc: Result, metrics: dict[str, Any], rank: int) -> dict[str, Any]:
    summary = timing_of(doc)
    failure, memory = doc.get("failure"), doc.get("memory")
    return {
        "rank": rank,
        "status": doc["status"],
        "failure": failure["message"] if failure else None,
        "mode": failure["mode"] if failure else None,
        "p50_s": summary["p50"] if summary else None,
        "peak_bytes": memory.get("peak_bytes") if memory else None,
        "metrics": metrics,
    }


def fail_rank(doc: Result, metrics: dict[str, Any], result_path: Path) -> None:
    rank = rank_env()[0]
    atomic_write_json(rank_part_path(result_path, rank), rank_part(doc, metrics, rank))
    sys.stderr.flush()
    os._exit(1)


def gather_ranks(doc: Result, metrics: dict[str, Any], result_path: Path) -> bool:
    """Every rank writes its part; rank 0 folds them into the record. True on rank 0."""
    import json

    rank, world, _ = rank_env()
    if world == 1:
        return True
    import torch.distributed as dist

    atomic_write_json(rank_part_path(result_path, rank), rank_part(doc, metrics, rank))
    if dist.is_initialized():
        dist.barrier()
    if rank != 0:
        return False
    parts = []
    for r in range(world):
        path = rank_part_path(result_path, r)
        parts.append(
            json.loads(path.read_text("utf-8"))
            if path.is_file()
            else {"rank": r, "status": "missing"}
        )
        path.unlink(missing_ok=True)
    doc["ranks"] = parts
    bad = [p for p in parts if p["status"] not in ("ok", doc["status"])]
    if bad and doc["status"] == "ok":
        doc["status"] = "failed"
        doc["failure"] = {
            "mode": "exception",
            "message": f"rank {bad[0]['rank']}: {bad[0].get('failure')}",
        }
    return True


def shutdown_distributed() -> None:
    if rank_env()[1] > 1:
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()
