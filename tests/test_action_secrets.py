"""The index secret on the fleet path: the workflow hands the bench job's action the lines
NAME=VALUE of its index-env secret (TORCH_MATRIX_INDEX_ENV). pip needs the variables they set;
no process of the suite may see the lines themselves, or a worker's environment record, the
container it starts and the comment's docker run line would carry them. The action's own steps
run here under bash, with a stand-in for the suite that keeps the environment it was given."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from suite.core.secrets import MASK, mask_value, redact
from tests.helpers import REPO

SECRET = "Idx-S3cret-value-42"
LINES = f"INDEX_USER=reader\nINDEX_TOKEN={SECRET}\n"


def _step(step_id: str) -> dict[str, Any]:
    action = yaml.safe_load((REPO / "action.yml").read_text())
    step: dict[str, Any] = next(s for s in action["runs"]["steps"] if s.get("id") == step_id)
    return step


def _run(step_id: str, tmp_path: Path, env: dict[str, str]) -> list[dict[str, str]]:
    """Run one step's script; the environment of every call of the suite it made."""
    dumps = tmp_path / "dumps"
    dumps.mkdir()
    python = tmp_path / "python"
    python.write_text(
        '#!/usr/bin/env bash\nenv -0 > "$DUMPS/$RANDOM$RANDOM"\necho "docker:img@sha256:0"\n'
    )
    python.chmod(0o755)
    runner = tmp_path / "runner"
    runner.mkdir()
    base = {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path),
        "DUMPS": str(dumps),
        "PYTHON": str(python),
        "GITHUB_OUTPUT": str(tmp_path / "output"),
        "RUNNER_TEMP": str(runner),
        "ACTION_PATH": str(REPO),
        "TORCH_MATRIX_INDEX_ENV": LINES,
    }
    step = _step(step_id)
    declared = dict.fromkeys(step.get("env") or {}, "")  # what GitHub sets, empty if not given
    proc = subprocess.run(
        ["bash", "-c", step["run"]], env={**declared, **base, **env}, cwd=tmp_path,
        capture_output=True,
        text=True, timeout=60, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert SECRET not in proc.stdout + proc.stderr
    calls = []
    for dump in sorted(dumps.iterdir()):
        pairs = (item.split("=", 1) for item in dump.read_text().split("\0") if "=" in item)
        calls.append(dict(pairs))
    return calls


BENCH = {
    "SIDES": "venv",
    "BACKEND": "cpu",
    "BASELINE": "torch==2.13.0",
    "CANDIDATE": "torch==2.14.1",
    "PROFILE": "research",
    "RESULTS_DIR": "results",
    "BASELINE_INDEX_URL": "https://${INDEX_USER}:${INDEX_TOKEN}@pypi.example.com/simple",
}


@pytest.mark.parametrize(
    ("step_id", "env"),
    [
        ("bench", BENCH),
        ("sides", {**BENCH, "SIDES": "images"}),  # both pins' image builds
    ],
    ids=["bench-venv", "sides-images"],
)
def test_the_suite_gets_the_index_variables_but_never_the_secret_lines(
    step_id: str, env: dict[str, str], tmp_path: Path
) -> None:
    calls = _run(step_id, tmp_path, env)
    assert len(calls) == (1 if step_id == "bench" else 2)  # ab once, or an image per pin
    for called in calls:
        assert called["INDEX_TOKEN"] == SECRET  # what pip expands ${INDEX_TOKEN} from
        assert "TORCH_MATRIX_INDEX_ENV" not in called
        assert not any(SECRET in v for k, v in called.items() if k.startswith("TORCH"))


def test_the_lines_are_masked_wherever_a_value_holds_them() -> None:
    """Should a runner set the lines where the action cannot unset them, the environment record
    masks each secret-named pair by the rule that names variables."""
    assert mask_value(LINES) == f"INDEX_USER=reader\nINDEX_TOKEN={MASK}\n"
    recorded = redact({"TORCH_MATRIX_INDEX_ENV": LINES, "TORCH_LOGS": "+dynamo"})
    assert SECRET not in recorded["TORCH_MATRIX_INDEX_ENV"]
    assert recorded["TORCH_LOGS"] == "+dynamo"
    # keys that only contain a secret word as part of another word are left alone
    assert mask_value("host=db port=5432 user=bench") == "host=db port=5432 user=bench"
