"""Gates computed from workload metrics rather than timing: one function per gate name."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from suite.policy import Gate

GateFn = Callable[[Gate, Sequence[dict[str, Any]], Sequence[dict[str, Any]]], dict[str, Any] | None]

METRIC_GATES: dict[str, GateFn] = {}
