"""The libraries a workload ran with beside torch, compared between the sides. Each cell records
the distributions whose modules it imported (suite/worker/envinfo.py); a version that differs
between the sides (transformers 4.57.1 on one, 4.58.0 on the other), or a library present on one
side only, is a changed workload, not the pin, and the decision says so. What moves with torch
(its own requirements, as each side's torch declares them, and its companion packages) is the
pin's own and never listed. A profile's `same_packages` names the libraries whose difference
defers the decision ("*": any)."""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping, Sequence
from typing import Any

from suite.core.decision_records import PackageDifference
from suite.core.loaded import LoadedRun

# Released with torch and pinned beside it: a move of these is the pin's.
COMPANIONS = frozenset(
    {"torch", "torchvision", "torchaudio", "triton", "pytorch-triton", "pytorch-triton-rocm",
     "pytorch-triton-xpu"}
)  # fmt: skip
SHOWN = 4


def _imports(records: Sequence[Mapping[str, Any]]) -> dict[str, str] | None:
    """The cell's libraries on one side (every round's, merged); None when no record says."""
    said = [r["imports"] for r in records if "imports" in r]
    if not said:
        return None
    merged: dict[str, str] = {}
    for found in said:
        merged.update(found)
    return merged


def _moving(run: LoadedRun) -> set[str]:
    env: Mapping[str, Any] = run.run.get("environment") or {}
    return set(env.get("torch_requires") or ())


def package_differences(base: LoadedRun, cand: LoadedRun) -> list[PackageDifference]:
    """Every library whose version differs between the sides in some cell, with how many."""
    moving = COMPANIONS | _moving(base) | _moving(cand)
    found: dict[tuple[str, str | None, str | None], int] = {}
    for cell_id in dict.fromkeys([*base.results, *cand.results]):
        b = _imports(base.results.get(cell_id, []))
        c = _imports(cand.results.get(cell_id, []))
        if b is None or c is None:
            continue  # records from before the libraries were recorded
        for name in sorted(set(b) | set(c)):
            if name not in moving and b.get(name) != c.get(name):
                key = (name, b.get(name), c.get(name))
                found[key] = found.get(key, 0) + 1
    return [
        {"name": n, "baseline": bv, "candidate": cv, "cells": k}
        for (n, bv, cv), k in sorted(found.items(), key=lambda x: x[0][0])
    ]


def _version(v: str | None) -> str:
    return v if v is not None else "absent"


def packages_line(diffs: Sequence[PackageDifference]) -> str:
    shown = "; ".join(
        f"{d['name']} {_version(d['baseline'])} → {_version(d['candidate'])} "
        f"({d['cells']} cell{'' if d['cells'] == 1 else 's'})"
        for d in diffs[:SHOWN]
    )
    more = f" (+{len(diffs) - SHOWN} more)" if len(diffs) > SHOWN else ""
    return (
        "the libraries the workloads imported differ between the sides beyond torch and what "
        f"moves with it — a changed workload, not only the pin: {shown}{more}"
    )


def held_by_policy(diffs: Sequence[PackageDifference], same: Sequence[str]) -> list[str]:
    """The differences in libraries the profile says must be the same on both sides."""
    return [d["name"] for d in diffs if any(fnmatch.fnmatchcase(d["name"], p) for p in same)]
