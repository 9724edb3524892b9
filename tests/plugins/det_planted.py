"""A planted nondeterminism: the seed depends on the process id, so two processes differ."""

from __future__ import annotations

import os

from suite.workloads import determinism
from suite.workloads.determinism import Determinism, main

determinism.seed_for = lambda seed: seed + os.getpid()  # the planted bug


class Nondeterministic(Determinism):
    name = "determinism"


__all__ = ["Nondeterministic", "main"]
