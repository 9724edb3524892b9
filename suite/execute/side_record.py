"""A prepared side of an A/B: what runs its workers and how. A leaf, so that every kind of side
(suite/execute/sides.py, suite/execute/docker.py) can build one without importing another."""

from __future__ import annotations

from dataclasses import dataclass

from suite.execute.launch import Launcher, run_process


@dataclass(frozen=True)
class Side:
    spec: str  # as the user wrote it
    label: str  # short, for reports
    interpreter: str
    prepared_s: float  # time to get the environment ready (0 when cached)
    kind: str  # "current", "python", "requirement", "docker"
    launcher: Launcher = run_process
    image: dict[str, str | None] | None = None  # reference and digest, for docker sides
