"""Shared fixtures: one real run of the planted quick workload, reused by read-only tests."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.helpers import cli, planted


@pytest.fixture(scope="session")
def quick_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("quick") / "run"
    code, _, err = cli(
        "run",
        "--workload",
        planted("Quick"),
        "--backend",
        "cpu",
        "--backend",
        "cuda",
        "--out",
        str(out),
        "--python",
        sys.executable,
    )
    assert code == 0, err
    return out
