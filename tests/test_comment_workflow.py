"""The comment workflow's job, read as data and its scripts run with bash: it refuses a runner
that is not GitHub-hosted before it downloads or fetches anything (unless allow-self-hosted
accepts the risk), clears the artifact folder a persistent workspace may have kept, takes the
head and the pull request from the event, and asks for no write beyond pull requests."""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.helpers import REPO

WORKFLOW = REPO / ".github" / "workflows" / "torch-matrix-comment.yml"
EXAMPLE = REPO / "examples" / "github" / "torch-matrix-comment.yml"
GUARD = "Refuse a runner that is not GitHub-hosted unless allow-self-hosted accepts it"
POST = "Post or update the sticky comment of each matrix, or mark the earlier heads' ones"
DOWNLOAD = "Download the decision artifacts"
COLLECT = "Collect the decision artifacts (offline runs)"
REFUSED = "::error::the comment job refuses runs-on"


def _doc(path: Path = WORKFLOW) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load(path.read_text())
    return doc


def _steps() -> list[dict[str, Any]]:
    steps: list[dict[str, Any]] = _doc()["jobs"]["comment"]["steps"]
    return steps


def _step(name: str) -> dict[str, Any]:
    return next(s for s in _steps() if s.get("name") == name)


def _bash(script: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """The step's script as the runner runs a `shell: bash` step."""
    file = cwd / "step.sh"
    file.write_text(script)
    return subprocess.run(
        ["bash", "--noprofile", "--norc", "-eo", "pipefail", str(file)],
        cwd=cwd,
        env={"PATH": os.environ["PATH"], **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _guard(
    tmp_path: Path, runs_on: str, allow: str = "false", kind: str = ""
) -> subprocess.CompletedProcess[str]:
    env = {"RUNS_ON": runs_on, "ALLOW_SELF_HOSTED": allow, "RUNNER_KIND": kind}
    return _bash(_step(GUARD)["run"], env, tmp_path)


def test_the_guard_reads_the_inputs_and_runs_before_anything_is_downloaded_or_fetched() -> None:
    steps = _steps()
    guard = steps[0]
    assert guard["name"] == GUARD and guard["shell"] == "bash" and "if" not in guard
    assert guard["env"] == {
        "RUNS_ON": "${{ inputs.runs-on }}",
        "ALLOW_SELF_HOSTED": "${{ inputs.allow-self-hosted }}",
        "RUNNER_KIND": "${{ runner.environment }}",
    }
    assert guard["run"].startswith("set -euo pipefail\n")
    inputs = _doc()[True]["workflow_call"]["inputs"]  # YAML 1.1 reads the key `on` as true
    assert inputs["allow-self-hosted"]["type"] == "boolean"
    assert inputs["allow-self-hosted"]["default"] is False
    assert "persistent workspace" in inputs["allow-self-hosted"]["description"]
    assert "pull requests" in inputs["allow-self-hosted"]["description"]
    assert inputs["runs-on"]["default"] == '["ubuntu-latest"]'
    assert all("uses" not in s and "git " not in s.get("run", "") for s in steps[:2])


@pytest.mark.parametrize(
    "runs_on",
    [
        '["ubuntu-latest"]',
        '[ "ubuntu-24.04" ]',
        '["ubuntu-24.04-arm", "ubuntu-22.04"]',
        '"windows-latest"',
        '["macos-15", "macos-latest-xlarge", "windows-2022", "ubuntu-slim"]',
    ],
)
def test_github_hosted_labels_pass(tmp_path: Path, runs_on: str) -> None:
    for kind in ("github-hosted", ""):  # a runner that says nothing: act, older runners
        done = _guard(tmp_path, runs_on, kind=kind)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "GitHub-hosted" in done.stdout and "::error::" not in done.stdout


@pytest.mark.parametrize(
    ("runs_on", "why"),
    [
        ('["self-hosted","linux"]', "self-hosted is not a GitHub-hosted runner's label"),
        ('["ubuntu-latest", "self-hosted"]', "self-hosted is not a GitHub-hosted runner's label"),
        ('["ubuntu-latest", "gpu"]', "gpu is not a GitHub-hosted runner's label"),
        ('["my-ubuntu-latest"]', "my-ubuntu-latest is not a GitHub-hosted runner's label"),
        ('["ubuntu-latest-16-cores"]', "is not a GitHub-hosted runner's label"),
        ('{"group": "comment-runners"}', "it is not a JSON list of runner labels"),
        ("[]", "it names no runner label"),
        ('["ubuntu-latest"]\n::error::x', "it is not a JSON list of runner labels"),
    ],
)
def test_other_labels_are_refused_with_the_risk_named(
    tmp_path: Path, runs_on: str, why: str
) -> None:
    done = _guard(tmp_path, runs_on)
    assert done.returncode == 1
    (line,) = [x for x in done.stdout.splitlines() if x.startswith("::error::")]
    assert line.startswith(REFUSED) and why in line, line
    assert "set allow-self-hosted: true to accept that risk" in line
    assert "token that may write to pull requests" in line


def test_a_runner_that_says_it_is_self_hosted_is_refused_whatever_its_labels(
    tmp_path: Path,
) -> None:
    done = _guard(tmp_path, '["ubuntu-latest"]', kind="self-hosted")
    assert done.returncode == 1 and "the job runs on a self-hosted runner" in done.stdout


@pytest.mark.parametrize("kind", ["", "self-hosted"])
def test_allow_self_hosted_accepts_the_risk(tmp_path: Path, kind: str) -> None:
    done = _guard(tmp_path, '["self-hosted","linux"]', allow="true", kind=kind)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "::warning::" in done.stdout and "allow-self-hosted accepts" in done.stdout
    assert "::error::" not in done.stdout


def test_the_artifact_folder_is_removed_before_it_is_downloaded_or_collected() -> None:
    names = [s.get("name") for s in _steps()]
    removes = [i for i, s in enumerate(_steps()) if s.get("run", "").strip() == "rm -rf artifact"]
    assert len(removes) == 1 and "if" not in _steps()[removes[0]]
    assert 0 < removes[0] < names.index(DOWNLOAD) and removes[0] < names.index(COLLECT)
    assert _step(DOWNLOAD)["with"]["path"] == "artifact"
    assert "artifact/" in _step(COLLECT)["run"]


def test_the_post_step_passes_the_events_head_and_author_to_every_command(
    tmp_path: Path,
) -> None:
    """The post step, run with a stand-in Python that records its argv: each decision command
    carries the event's head and the named author, and the PR number is the event's."""
    post = _step(POST)
    env = post["env"]
    assert env["HEAD_SHA"] == "${{ github.event.workflow_run.head_sha }}"
    assert env["PR_NUMBER"] == "${{ github.event.workflow_run.pull_requests[0].number }}"
    assert env["AUTHOR"] == "${{ inputs.author }}"
    folder = tmp_path / "artifact" / "torch-matrix-comment~pr-check"
    folder.mkdir(parents=True)
    (folder / "decision.json").write_text("{}")
    calls = tmp_path / "calls"
    python = tmp_path / "python"
    python.write_text(f'#!/bin/bash\nprintf "%s\\n" "$*" >>{shlex.quote(str(calls))}\n')
    python.chmod(0o755)
    head = "b" * 40
    values = {
        "GITHUB_TOKEN": "unused",
        "REPOSITORY": "octo/widgets",
        "PR_NUMBER": "12",
        "RUN_STARTED_AT": "2026-11-30T10:00:00Z",
        "RUN_URL": "https://github.com/octo/widgets/actions/runs/9",
        "HEAD_SHA": head,
        "CONCLUSION": "success",
        "EVENT_ACTION": "completed",
        "PYTHON": str(python),
    }
    for author, expected in (("", None), ("matrix-app[bot]", "--author matrix-app[bot]")):
        calls.unlink(missing_ok=True)
        done = _bash(post["run"], {**values, "AUTHOR": author}, tmp_path)
        assert done.returncode == 0, done.stdout + done.stderr
        decision, ended = calls.read_text().splitlines()
        assert decision.startswith("-I -m suite comment --decision artifact/torch-matrix-comment~")
        assert "--name pr-check" in decision and "--pr 12" in decision
        for line in (decision, ended):
            assert f"--head-sha {head}" in line
            assert (expected in line) if expected else ("--author" not in line)


@pytest.mark.parametrize("path", [WORKFLOW, EXAMPLE])
def test_the_comment_job_writes_pull_requests_only(path: Path) -> None:
    """Creating, updating and deleting a pull request's issue comments takes issues or
    pull-requests write; the job asks for the second only, and reads the run's artifacts."""
    permissions = _doc(path)["jobs"]["comment"]["permissions"]
    assert permissions == {"actions": "read", "pull-requests": "write"}
    assert _doc(path)["permissions"] == {"contents": "read"}
