"""A backend no machine has, registered by tests/test_registries.py at run time: its worker
side probes as absent, so a cell on it is skipped with the reason below."""

from __future__ import annotations

from suite.worker.backends import Availability, CpuBackend


class NpuBackend(CpuBackend):
    device_type = "cpu"

    def probe(self) -> Availability:
        return Availability(False, "no NPU here (a test's backend)")
