"""The drift between two saved output files, measured once where torch is, read anywhere.

A bench job (torch installed) measures the drift between a baseline's and a candidate's saved
outputs and keeps the figure in drift.json beside the right-hand file, keyed by both files'
SHA-256. The aggregate job re-judges under the base branch's policy without torch: the figure
does not depend on the policy (only its tolerance does), so it reads the kept figure. A file
that changed since (another digest) finds no figure; without torch it cannot be measured
again, and the caller says so (untested) rather than passing it.
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

from suite.core.accuracy import Drift, tensor_drift

FIGURES = "drift.json"


class NotMeasurable(Exception):
    """No kept figure for these two files, and no torch here to measure one."""


def _digest(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _key(left: Path, right: Path) -> str:
    return f"{_digest(left)}:{_digest(right)}"


def _kept(path: Path) -> dict[str, dict[str, object]]:
    try:
        loaded = json.loads(path.read_text("utf-8"))
    except (OSError, ValueError):
        return {}
    return loaded if isinstance(loaded, dict) else {}


def saved_drift(left: Path, right: Path) -> Drift:
    """tensor_drift of the outputs saved in two files, from the kept figure where there is one.

    NotMeasurable where there is none and torch cannot be imported."""
    figures_path = right.parent / FIGURES
    key = _key(left, right)
    kept = _kept(figures_path).get(key)
    if kept is not None:
        relative = float(str(kept.get("relative", "inf")))
        return Drift(str(kept.get("name", "")), relative, missing=bool(kept.get("missing")))
    try:
        import torch
    except ImportError:
        named = " and ".join("/".join(p.parts[-3:]) for p in (left, right))
        raise NotMeasurable(
            f"no drift figure kept for {named}, and torch is not installed here to measure one"
        ) from None
    found = tensor_drift(torch.load(left, weights_only=True), torch.load(right, weights_only=True))
    figures = _kept(figures_path)
    kept_relative: float | str = found.relative if math.isfinite(found.relative) else "inf"
    figures[key] = {"name": found.name, "relative": kept_relative, "missing": found.missing}
    tmp = figures_path.with_suffix(".tmp")
    tmp.write_text(json.dumps(figures, indent=1, sort_keys=True) + "\n", "utf-8")
    tmp.replace(figures_path)
    return found
