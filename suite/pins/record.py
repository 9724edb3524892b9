"""The record `pins` writes (--json, and the step outputs): what moved, the sides `ab` takes, the
index URLs each side may install from, and each environment of the repository with its own sides,
for a plan that gives a backend its environment's move (the matrix's pin-source).
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from suite.pins.assess import Assessment, Pin
from suite.pins.index_hosts import check_indexes


def _sides(
    result: Assessment, pins: tuple[Pin | None, Pin | None], hosts: Collection[str]
) -> tuple[dict[str, Any], tuple[str, ...]]:
    """The index URLs and images of two pins as the bench job takes them, and the notes of the
    URLs that lost their credential or were dropped."""
    checked = check_indexes(result, hosts, pins)
    out: dict[str, Any] = {}
    for role, pin in zip(("baseline", "candidate"), pins, strict=True):
        # As the pin file writes them, ${VAR} kept (on approved hosts only); a literal
        # credential never leaves masked.
        out[f"{role}_index_url"] = checked.sides[role].index_url
        out[f"{role}_extra_index_urls"] = list(checked.sides[role].extra_index_urls)
        out[f"{role}_image"] = pin.image if pin else None
    return out, checked.notes


def _environments(result: Assessment, hosts: Collection[str]) -> tuple[list[Any], list[str]]:
    """Each environment that pins torch, with its sides, their indexes and images."""
    found, notes = [], list[str]()
    for move in result.environment_moves:
        entry: dict[str, Any] = {
            "environment": move.environment,
            "baseline": move.old.side if move.old else None,
            "candidate": move.new.side if move.new else None,
            "moved": move.key()[0] != move.key()[1],
        }
        if entry["moved"]:
            sides, said = _sides(result, (move.old, move.new), hosts)
            entry |= sides
            notes += said
        found.append(entry)
    return found, notes


def pins_record(result: Assessment | None, index_hosts: Collection[str] = ()) -> dict[str, Any]:
    """The JSON `pins --json` prints for a suite.pins.assess.Assessment (None: no change).

    status is changed, unknown or unchanged; run says whether the matrix must run (torch moved,
    or it cannot be told that it did not); changed stays true only for a known move. The index
    URLs keep a credential (${VAR} or literal, masked) only on an approved host: one the base
    side's index URLs name, or one of index_hosts (suite/pins/index_hosts.py)."""
    if result is None or result.status == "unchanged":
        record: dict[str, Any] = {
            "changed": False,
            "status": "unchanged",
            "run": False,
            "message": "no torch change",
        }
        if result is not None and result.disagreements:
            record["disagreements"] = list(result.disagreements)
        return record
    environments, environment_notes = _environments(result, index_hosts)
    record = {
        "changed": result.status == "changed",
        "status": result.status,
        "run": True,
        "baseline": result.baseline,
        "candidate": result.candidate,
        "files": list(result.files),
        "message": result.message,
        "unknown": [u.as_dict() for u in result.unknown],
        "disagreements": list(result.disagreements),
        "companions": {
            pkg: {"baseline": old, "candidate": new} for pkg, old, new in result.companions
        },
        # Each environment that pins torch (a Dockerfile or one of its stages; a workflow's
        # job; a folder's manifests and locks), with the sides a backend's job takes from it.
        "environments": environments,
    }
    sides, notes = _sides(result, (result.baseline_pin, result.candidate_pin), index_hosts)
    record |= sides
    # What the bench job passes on as TORCH_MATRIX_INDEX_HOSTS, and what it should say.
    record["index_hosts"] = list(check_indexes(result, index_hosts).hosts)
    record["index_notes"] = list(dict.fromkeys([*notes, *environment_notes]))
    # What an image of each side installs beside torch: the companions that moved with it.
    record["baseline_companions"] = [old for _, old, _ in result.companions if old]
    record["candidate_companions"] = [new for _, _, new in result.companions if new]
    return record
