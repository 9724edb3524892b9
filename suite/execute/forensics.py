"""A distributed cell that timed out, read back: which ranks never reached the collective the
others wait in, each rank's stacks as it said them before the stop (suite/worker/forensics.py),
and on CUDA the NCCL flight recorder's dump, kept with the evidence."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from suite.core.spec import CellSpec
from suite.core.wire import DEADLINE_VAR, STACKS_MARK, heard

FLIGHT_DIR = "flight"


def deadline_env(timeout_s: float) -> dict[str, str]:
    """When the parent stops the cell, for the ranks' watchdogs."""
    return {DEADLINE_VAR: f"{time.time() + timeout_s:.3f}"}


def forensic_env(spec: CellSpec, run_dir: Path, stem: str, timeout_s: float) -> dict[str, str]:
    """Everything a distributed cell's ranks need to leave forensics before a timeout stops it."""
    return {**deadline_env(timeout_s), **flight_recorder_env(spec, run_dir, stem)}


def hang_in(
    texts: Sequence[str], run_id: str, world: int, run_dir: Path, stem: str
) -> dict[str, Any] | None:
    """hang_of the ranks' outputs, with the flight recorder's dumps of the cell STEM."""
    return hang_of(texts, run_id, world, flight_files(run_dir, stem))


def flight_recorder_env(spec: CellSpec, run_dir: Path, stem: str) -> dict[str, str]:
    """On a CUDA or ROCm cell of several ranks: keep NCCL's flight recorder (its last
    collectives per rank) and dump it when a collective times out, into the run's flight/
    folder (torch adds the rank to the file name). Nothing on other backends."""
    if spec.backend not in ("cuda", "rocm") or spec.world_size < 2:
        return {}
    return {
        "TORCH_NCCL_TRACE_BUFFER_SIZE": "20000",
        "TORCH_NCCL_DUMP_ON_TIMEOUT": "1",
        "TORCH_NCCL_DEBUG_INFO_TEMP_FILE": str(run_dir / FLIGHT_DIR / f"{stem}.rank"),
    }


def flight_files(run_dir: Path, stem: str) -> list[str]:
    """The flight recorder's dumps of this cell, relative to the run directory."""
    folder = run_dir / FLIGHT_DIR
    if not folder.is_dir():
        return []
    return sorted(str(p.relative_to(run_dir)) for p in folder.glob(f"{stem}.rank*"))


def hang_of(
    texts: Sequence[str], run_id: str, world: int, flight: Sequence[str] = ()
) -> dict[str, Any] | None:
    """What the ranks said of themselves before the stop; None where none said anything and
    no flight recorder dump was kept."""
    said: dict[int, dict[str, Any]] = {}
    for text in texts:
        for doc in heard(text, STACKS_MARK):
            rank = doc.get("rank")
            if doc.get("run_id") == run_id and isinstance(rank, int) and rank not in said:
                said[rank] = {
                    "rank": rank,
                    "node": doc.get("node") if isinstance(doc.get("node"), int) else None,
                    "in_collective": bool(doc.get("in_collective")),
                    "top": str(doc["top"]) if doc.get("top") else None,
                    "stacks": str(doc.get("stacks") or ""),
                }
    if not said and not flight:
        return None
    ranks = [said[r] for r in sorted(said)]
    waiting = [r["rank"] for r in ranks if r["in_collective"]]
    return {
        "ranks": ranks,
        # Only where some rank waits in a collective does one outside it hold the others up.
        "never_arrived": [r["rank"] for r in ranks if not r["in_collective"]] if waiting else [],
        "unheard": [r for r in range(world) if r not in said],
        "flight_recorder": list(flight),
    }


def hang_text(hang: dict[str, Any] | None) -> str:
    """One line for the failure message: the rank that held the others up and where it was."""
    if not hang:
        return ""
    ranks = {r["rank"]: r for r in hang["ranks"]}
    parts = []
    for rank in hang["never_arrived"]:
        where = ranks[rank]["top"]
        parts.append(
            f"rank {rank} never reached the collective the others wait in"
            + (f" (at {where})" if where else "")
        )
    if not parts and ranks:
        first = next(iter(ranks.values()))
        state = (
            "every rank waits in a collective"
            if first["in_collective"]
            else "no rank waits in a collective"
        )
        parts.append(f"{state} (rank {first['rank']} at {first['top']})")
    if hang["unheard"]:
        parts.append(f"no stacks from rank {', '.join(map(str, hang['unheard']))}")
    if hang["flight_recorder"]:
        parts.append(f"flight recorder: {', '.join(hang['flight_recorder'])}")
    return "; ".join(parts)
