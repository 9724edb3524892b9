"""No worker shares a file, a descriptor or an environment with the index credential (class 7).

The bench job's action is run here as the runner runs it: its sides step (the only one whose
environment holds the index lines, as the action's input) and then its bench step, under bash,
with the real suite. The bench step's one cell is a planted workload that looks for the secret
wherever a process of the runner's user can: every /proc/PID/environ and cmdline it may read,
every descriptor under /proc/PID/fd it may open (the suite's own included), and every file
under the runner's temporary folder and the step's folder. It finds nothing; a control process
started with the secret in its environment shows that the look would find it there.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from tests.helpers import REPO

SECRET = "worker-Idx-S3cret-0451"
LINES = f"INDEX_USER=reader\nINDEX_TOKEN={SECRET}\n"

SPY = """
import os
from pathlib import Path

from suite.workloads import CellContext, Workload

SECRET = {backwards!r}[::-1].encode()  # written backwards: this file must not hold it
REPORT = Path({report!r})
ROOTS = [Path(p) for p in {roots!r}]


def _read(path, limit=1 << 20):
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        return os.read(fd, limit)
    except OSError:
        return None
    finally:
        os.close(fd)


class Spy(Workload):
    name = "spy"
    description = "looks for the index secret wherever this user can read"
    sizes = {{"smoke": {{}}, "full": {{}}}}

    def run(self, ctx: CellContext) -> None:
        found, looked = [], 0
        for proc in Path("/proc").iterdir():
            if not proc.name.isdigit():
                continue
            for name in ("environ", "cmdline"):
                data = _read(proc / name)
                looked += data is not None
                if data and SECRET in data:
                    found.append(f"/proc/PID/{{name}} of {{_read(proc / 'comm')!r}}")
            try:
                fds = list((proc / "fd").iterdir())
            except OSError:
                continue
            for fd in fds:
                data = _read(fd)
                looked += data is not None
                if data and SECRET in data:
                    found.append(f"/proc/PID/fd/{{fd.name}} of {{_read(proc / 'comm')!r}}")
        for root in ROOTS:
            for path in root.rglob("*"):
                if path.is_file() and not path.is_symlink() and path != REPORT:
                    data = _read(path)
                    looked += data is not None
                    if data and SECRET in data:
                        found.append(str(path))
        # Appended: every run of the cell (each side, the rollback rehearsal) adds its own
        # look, and a pipe one look drained would be empty for the next.
        with open(REPORT, "a") as fh:
            fh.write("\\n".join([f"looked {{looked}}", *found]) + "\\n")
"""


def _step(step_id: str) -> dict[str, Any]:
    action = yaml.safe_load((REPO / "action.yml").read_text())
    step: dict[str, Any] = next(s for s in action["runs"]["steps"] if s.get("id") == step_id)
    return step


def _run_step(step_id: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """One step's script under bash, its declared environment set as the runner sets it."""
    step = _step(step_id)
    declared = dict.fromkeys(step.get("env") or {}, "")
    return subprocess.run(
        ["bash", "-c", step["run"]], env={**declared, **env}, cwd=cwd,
        capture_output=True, text=True, timeout=900, check=False,
    )  # fmt: skip


def test_only_the_sides_step_is_given_the_lines() -> None:
    """The workflow hands the secret to the action as an input, not in the step's env (which
    every step of the action would inherit), and only the sides step puts it in its own."""
    workflow = yaml.safe_load((REPO / ".github/workflows/torch-matrix.yml").read_text())
    (bench,) = [
        s for s in workflow["jobs"]["bench"]["steps"] if str(s.get("uses", "")).startswith("./")
    ]
    assert not [v for v in (bench.get("env") or {}).values() if "secrets." in str(v)], bench
    assert bench["with"]["index-env"] == "${{ secrets.index-env }}"
    action = yaml.safe_load((REPO / "action.yml").read_text())
    given = [s.get("id") for s in action["runs"]["steps"] if "inputs.index-env" in json.dumps(s)]
    assert given == ["sides"], given


def test_a_planted_workload_finds_the_credential_nowhere(tmp_path: Path) -> None:
    runner, work = tmp_path / "runner", tmp_path / "work"
    runner.mkdir()
    work.mkdir()
    report = tmp_path / "found.txt"
    (work / "spy.py").write_text(
        SPY.format(backwards=SECRET[::-1], report=str(report), roots=[str(runner), str(work)])
    )
    (work / "matrix.yml").write_text(
        "version: 1\nbackends: [cpu]\nworkloads:\n  - workload: spy.py:Spy\n"
    )
    base = {
        "PATH": os.environ["PATH"],
        "HOME": os.environ.get("HOME", str(tmp_path)),
        "RUNNER_TEMP": str(runner),
        "GITHUB_OUTPUT": str(tmp_path / "output"),
        "GITHUB_STEP_SUMMARY": str(tmp_path / "summary"),
        "PYTHON": sys.executable,
        "ACTION_PATH": str(REPO),
        "SIDES": "venv",
        "BACKEND": "cpu",
        "BASELINE": "current",
        "CANDIDATE": "current",
        "TORCH_MATRIX_INDEX_HOSTS": "pkgs.example.com",  # the uses step's env, as the workflow's
        "TORCH_MATRIX_COUNT": "0",
    }
    sides = _run_step("sides", work, {**base, "TORCH_MATRIX_INDEX_ENV": LINES})
    assert sides.returncode == 0, sides.stderr
    outputs = dict(
        line.split("=", 1) for line in (tmp_path / "output").read_text().splitlines() if "=" in line
    )
    index_env = Path(outputs["index-env"])
    assert (
        index_env.read_text().strip() == LINES.strip()
        and oct(index_env.stat().st_mode)[-3:] == "600"
    )
    control = subprocess.Popen(["sleep", "600"], env={"HOLDER": SECRET})
    try:
        bench = _run_step(
            "bench",
            work,
            {
                **base,
                "INDEX_ENV_FILE": str(index_env),
                "MATRIX_FILE": "matrix.yml",
                "PROFILE": "research",
                "ROUNDS": "1",
                "RESULTS_DIR": "results",
            },
        )
    finally:
        control.kill()
        control.wait()
    assert bench.returncode == 0, bench.stdout[-3000:] + bench.stderr[-3000:]
    assert SECRET not in bench.stdout + bench.stderr
    lines = report.read_text().splitlines()
    looks = [int(x.split()[1]) for x in lines if x.startswith("looked ")]
    assert len(looks) >= 2 and min(looks) > 10, looks  # each side's run read what it could
    found = {x for x in lines if not x.startswith("looked ")}
    assert found == {"/proc/PID/environ of b'sleep\\n'"}, found  # the control, and only it
    assert not index_env.exists()
