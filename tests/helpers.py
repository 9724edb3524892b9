"""Helpers shared by the tests."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from click.testing import CliRunner

from suite.cli.main import main

TESTS = Path(__file__).resolve().parent
PLANTED = TESTS / "plugins" / "planted.py"
REPO = TESTS.parent
SHARED_REFS = REPO.parent / "shared" / "refs"


def planted(name: str) -> str:
    return f"{PLANTED}:{name}"


def cli(*args: str) -> tuple[int, str, str]:
    runner = CliRunner()
    result = runner.invoke(main, list(args), catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


def docker_works() -> bool:
    """Whether a Docker daemon answers `docker info` here."""
    if shutil.which("docker") is None:
        return False
    try:
        return subprocess.run(["docker", "info"], capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False
