"""Which torch each backend's jobs take, when a repository's environments pin torch apart.

`pins` tells a change environment by environment (suite/pins/environments.py): the CUDA
Dockerfile, the ROCm one, the requirements folder. When the environments that moved agree, every
backend takes that one move. When they moved differently, which one a backend's job installs is
not in the pins: the matrix says it, backend by backend (`pin-source: {cuda:
docker/Dockerfile.cuda, rocm: docker/Dockerfile.rocm}`), and each job takes its environment's
baseline, candidate, indexes and image. A backend whose environment did not move is not planned
(the change does not touch the torch it runs), and a plan says so; a backend the matrix gives no
environment, when environments moved differently, is said too: it runs on the pins' own answer,
which is one of the moves, not known to be its own.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from suite.core.errors import InputError
from suite.workloads.matrix import Matrix

# The keys of a pins record's environment that a job takes, as the bench job's inputs name them.
_SIDE_KEYS = {
    "baseline": "baseline",
    "candidate": "candidate",
    "baseline_index_url": "baseline-index-url",
    "candidate_index_url": "candidate-index-url",
    "baseline_extra_index_urls": "baseline-extra-index-urls",
    "candidate_extra_index_urls": "candidate-extra-index-urls",
    "baseline_image": "baseline-image",
    "candidate_image": "candidate-image",
}


@dataclass
class BackendPins:
    """Per backend: the sides its jobs take (bench job input -> value), the backends not
    planned (backend -> why), and what the plan says of them."""

    sides: dict[str, dict[str, str]] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def load_environments(path: Path) -> list[dict[str, Any]]:
    """The environments of a pins record: the file holds the record (`pins --json`) or its
    environments list (the step output)."""
    try:
        doc: Any = json.loads(path.read_text(encoding="utf-8") or "[]")
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(f"cannot read the pins' environments: {exc}", file=str(path)) from None
    found = doc.get("environments", []) if isinstance(doc, dict) else doc
    if not isinstance(found, list) or not all(
        isinstance(e, dict) and isinstance(e.get("environment"), str) for e in found
    ):
        raise InputError(
            "not a list of environments, each with its name",
            file=str(path),
            path="$.environments" if isinstance(doc, dict) else "$",
        )
    return found


def _shown(env: Mapping[str, Any]) -> str:
    return f"{env['environment']}: {env.get('baseline') or 'no torch'} -> " + str(
        env.get("candidate") or "no torch"
    )


def _job_sides(env: Mapping[str, Any]) -> dict[str, str]:
    out = {}
    for key, name in _SIDE_KEYS.items():
        value = env.get(key)
        if isinstance(value, list):
            value = " ".join(str(v) for v in value)
        out[name] = "" if value is None else str(value)
    out["baseline"] = out["baseline"] or "current"  # no torch pinned on the base: what is there
    out["pin-source"] = str(env["environment"])
    return out


def backend_pins(
    matrix: Matrix, environments: Sequence[Mapping[str, Any]], backends: Sequence[str]
) -> BackendPins:
    """The sides each planned backend's jobs take from its pin-source environment."""
    by_name = {str(e["environment"]): e for e in environments}
    moved = [e for e in environments if e.get("moved", e.get("baseline") != e.get("candidate"))]
    apart = len({(e.get("baseline"), e.get("candidate")) for e in moved}) > 1
    out = BackendPins()
    unnamed = [b for b in backends if b not in matrix.pin_sources]
    if apart and unnamed:
        out.notes.append(
            "environments moved differently ("
            + "; ".join(_shown(e) for e in moved)
            + f") and the matrix names no pin-source for {', '.join(unnamed)}: "
            + ("it" if len(unnamed) == 1 else "they")
            + " ran on the pins' first answer, which may not be the torch its jobs install"
        )
    for backend in backends:
        source = matrix.pin_sources.get(backend)
        if source is None:
            continue
        env = by_name.get(source)
        if env is None:
            raise InputError(
                f"pin-source {source!r} for {backend} is no environment that pins torch on "
                f"either side; pins found: {', '.join(sorted(by_name)) or 'none'}",
                file=matrix.file,
                path=f"$.pin-source.{backend}",
            )
        if env in moved and env.get("candidate"):
            out.sides[backend] = _job_sides(env)
            out.notes.append(f"{backend} ran its pin-source, {_shown(env)}")
        elif env in moved:
            out.skipped[backend] = f"its pin-source removes torch ({_shown(env)})"
        else:
            out.skipped[backend] = f"its pin-source did not move ({_shown(env)})"
    return out


def planned_cells(cells: Sequence[Any], pins: BackendPins, matrix: Matrix) -> list[Any]:
    """The cells of the backends that are planned: none of a backend whose pin-source did not
    move. When no backend is left, the move is in environments no backend of the matrix runs
    in: an input error, never an empty plan that says nothing."""
    kept = [c for c in cells if c.backend not in pins.skipped]
    if cells and not kept:
        why = "; ".join(f"{b}: {why}" for b, why in pins.skipped.items())
        raise InputError(
            f"nothing to plan: no backend's pin-source moved ({why}); the change moves torch "
            "only in environments no backend of this matrix installs",
            file=matrix.file,
            path="$.pin-source",
        )
    return kept


def with_sides(strategy: dict[str, Any], pins: BackendPins) -> dict[str, Any]:
    """The strategy matrix with each job's sides (`pins`) where its backend has a pin-source."""
    for job in strategy["include"]:
        if job["backend"] in pins.sides:
            job["pins"] = dict(pins.sides[job["backend"]])
    return strategy


def skipped_notes(pins: BackendPins, cells: Sequence[Any]) -> list[str]:
    """One line per backend not planned because its pin-source did not move."""
    out = []
    for backend, why in pins.skipped.items():
        count = len({c.cell_id for c in cells if c.backend == backend})
        out.append(f"{backend} ({count} cell{'' if count == 1 else 's'}) not planned: {why}")
    return out
