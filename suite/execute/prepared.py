"""A prepared side of an A/B: what runs its workers and how. A leaf, so that every kind of side
(suite/execute/sides.py, suite/execute/docker.py) can build one without importing another."""

from __future__ import annotations

from dataclasses import dataclass, field

from suite.core.records import ImageRecord
from suite.execute.indexes import Indexes
from suite.execute.launch import Launcher, run_process
from suite.execute.pinned import BaselinePins, Relaxation


@dataclass(frozen=True)
class PreparedSide:
    spec: str  # as the user wrote it (written only through suite.core.secrets.redact_text)
    label: str  # short, for reports
    interpreter: str
    prepared_s: float  # time to get the environment ready (0 when cached)
    kind: str  # "current", "python", "requirement", "docker"
    launcher: Launcher = run_process
    # docker sides: reference, digest, the recipe and suite labels (suite/execute/docker.py)
    image: ImageRecord | None = None
    indexes: Indexes = field(default_factory=Indexes)  # where a requirement side's torch came from
    # what the workload needs beside torch (--with): in a requirement side's venv, checked in an
    # interpreter side's; kept so that a side prepared again (the rollback rehearsal) holds them
    with_requirements: tuple[str, ...] = ()
    # a requirement side built for a baseline (suite/execute/pinned.py): the pins its venv holds,
    # so that the side prepared again is the same venv, and what could not be held, for a warning
    pins: BaselinePins | None = None
    relaxed: tuple[Relaxation, ...] = ()
