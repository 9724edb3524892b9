"""Shared fixtures: one real run of the planted quick workload, reused by read-only tests.

With TORCH_MATRIX_NO_SKIPS=1 (set by .ci/run) a skipped test fails instead, unless it skipped
for hardware this machine cannot have: a tool missing from CI is coverage lost, not a skip.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterator
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


@pytest.fixture(autouse=True)
def _counting_where_asked(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """An A/B counts instructions (minutes under Valgrind) only in tests marked `counting`:
    elsewhere the instructions gate of the built-in profiles is untested, as `--no-count`
    leaves it, and the tests of other things do not pay for counting."""
    if request.node.get_closest_marker("counting") is None:
        monkeypatch.setenv("TORCH_MATRIX_COUNT", "0")


# Skips that no amount of installing can avoid on a Linux CPU machine.
HARDWARE = re.compile(r"GPU|CUDA|ROCm|MPS|Apple Silicon|macOS|darwin", re.IGNORECASE)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    if os.environ.get("TORCH_MATRIX_NO_SKIPS") != "1" or not report.skipped:
        return
    reason = (
        str(report.longrepr[-1]) if isinstance(report.longrepr, tuple) else str(report.longrepr)
    )
    if getattr(report, "wasxfail", None) is None and not HARDWARE.search(reason):
        report.outcome = "failed"
        report.longrepr = f"skipped in CI, where every tool the tests need is installed: {reason}"
