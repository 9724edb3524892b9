"""Helpers shared by the tests."""

from __future__ import annotations

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
