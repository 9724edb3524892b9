"""The index secret on the fleet path: the workflow hands the bench job's action the lines
NAME=VALUE of its index-env secret (TORCH_MATRIX_INDEX_ENV). pip needs the variables they set;
no process of the suite has them in its environment (the suite imports workload code, and a
worker's environment record, the container it starts and the comment's docker run line would
carry them): they reach the suite as a file only this user reads (TORCH_MATRIX_INDEX_ENV_FILE),
which the suite reads where pip runs, for the approved hosts alone; the bench step removes the
file and hands the lines on descriptor 3 instead (tests/hostile/test_worker_credentials.py). The action's own steps run
here under bash, with a stand-in for the suite that keeps the environment it was given and a
copy of that file."""

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
        '#!/usr/bin/env bash\nd="$DUMPS/$RANDOM$RANDOM"\nenv -0 > "$d"\n'
        'if [ -n "${TORCH_MATRIX_INDEX_ENV_FILE:-}" ]; then\n'
        '  stat -c %a "$TORCH_MATRIX_INDEX_ENV_FILE" > "$d.mode"\n'
        '  cp "$TORCH_MATRIX_INDEX_ENV_FILE" "$d.file"\nfi\n'
        'if [ -e "${INDEX_ENV_FILE:-/nonexistent}" ]; then : > "$d.ondisk"; fi\n'
        'echo "docker:img@sha256:0"\n'
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
    for dump in sorted(d for d in dumps.iterdir() if not d.suffix):
        pairs = (item.split("=", 1) for item in dump.read_text().split("\0") if "=" in item)
        called = dict(pairs)
        if dump.with_suffix(".file").exists():
            called[" file"] = dump.with_suffix(".file").read_text()
            called[" mode"] = dump.with_suffix(".mode").read_text().strip()
            called[" on disk"] = str(dump.with_suffix(".ondisk").exists())
        calls.append(called)
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
def test_the_suite_gets_the_index_variables_in_a_file_never_in_its_environment(
    step_id: str, env: dict[str, str], tmp_path: Path
) -> None:
    if step_id == "bench":  # the sides step wrote the file; the bench step removes it after
        (tmp_path / "index.env").write_text(LINES)
        (tmp_path / "index.env").chmod(0o600)
        env = {**env, "INDEX_ENV_FILE": str(tmp_path / "index.env")}
    calls = _run(step_id, tmp_path, env)
    assert len(calls) == (1 if step_id == "bench" else 2)  # ab once, or an image per pin
    for called in calls:
        assert called[" file"].strip() == LINES.strip()  # what pip expands ${INDEX_TOKEN} from
        if step_id == "bench":  # on a descriptor, the file already gone from the disk
            assert called["TORCH_MATRIX_INDEX_ENV_FILE"] == "/dev/fd/3"
            assert called[" on disk"] == "False"
        else:
            assert called[" mode"] == "600"
        assert "INDEX_TOKEN" not in called and "INDEX_USER" not in called
        assert "TORCH_MATRIX_INDEX_ENV" not in called
        assert not any(SECRET in v for k, v in called.items() if not k.startswith(" "))
    if step_id == "bench":
        assert not (tmp_path / "index.env").exists()
    else:  # the images are built: the lines leave the disk with the step
        assert not (tmp_path / "runner" / "torch-matrix-index.env").exists()


def test_the_lines_are_masked_wherever_a_value_holds_them() -> None:
    """Should a runner set the lines where the action cannot unset them, the environment record
    masks each secret-named pair by the rule that names variables."""
    assert mask_value(LINES) == f"INDEX_USER=reader\nINDEX_TOKEN={MASK}\n"
    recorded = redact({"TORCH_MATRIX_INDEX_ENV": LINES, "TORCH_LOGS": "+dynamo"})
    assert SECRET not in recorded["TORCH_MATRIX_INDEX_ENV"]
    assert recorded["TORCH_LOGS"] == "+dynamo"
    # keys that only contain a secret word as part of another word are left alone
    assert mask_value("host=db port=5432 user=bench") == "host=db port=5432 user=bench"
