"""Where the suite keeps what outlives a run on this machine (side venvs, passed smoke tests): a
leaf, so that every kind of side can find it without importing another."""

from __future__ import annotations

import os
from pathlib import Path

CACHE_VAR = "TORCH_MATRIX_CACHE"


def cache_root() -> Path:
    """$TORCH_MATRIX_CACHE, else $XDG_CACHE_HOME/torch-matrix, else ~/.cache/torch-matrix."""
    base = os.environ.get(CACHE_VAR) or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "torch-matrix"
    )
    return Path(base)
