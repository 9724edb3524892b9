"""Helpers shared by the tests."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from suite.cli.main import main

TESTS = Path(__file__).resolve().parent
PLANTED = TESTS / "plugins" / "planted.py"
REPO = TESTS.parent
SHARED_REFS = REPO.parent / "shared" / "refs"

# One intra-op thread for every torch the tests start (this process's, each worker's, and each
# container's, which is forwarded OMP_NUM_THREADS): a worker then leaves a CPU spare, so one
# other busy process — a shared runner's neighbour, a CPU hog beside CI — is not a disturbance
# (suite/worker/measure.py counts only what exceeds the spare CPUs), and a test that needs its
# timed rounds gets them on a busy machine as on a quiet one. The rounds that a planted busy
# process disturbs (tests/test_disturbed.py) share the worker's own CPU, and still are.
THREADS_ENV = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


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


def adopts_where_decided(code: int, decision: dict[str, Any]) -> None:
    """No rule blocked any row: an adopt (exit 0), or, where some gate was decided in no cell
    (timing from one or two rounds on a busy runner), a defer (exit 5) whose only extra reasons
    name those missing gates (after the line of rounds it could not judge). What a test of images or resumes cares about is that nothing
    failed; whether the timings decided depends on the machine."""
    assert all(row["decision"] == "adopt" for row in decision["rows"]), decision["reasons"]
    if decision["decision"] == "adopt":
        assert code == 0
        return
    assert (code, decision["decision"]) == (5, "defer"), decision["reasons"]
    # First, what the run could not do as asked: fewer judged rounds than --rounds, where a round
    # stayed disturbed on a busy runner (the tests keep disturbed rounds: TORCH_MATRIX_RERUNS=0).
    reasons = [r for r in decision["reasons"] if not r.startswith("--rounds ")]
    missing = [r for r in reasons if " was decided in no cell " in r]
    assert missing and reasons[: len(missing)] == missing, decision["reasons"]
