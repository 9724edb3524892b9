"""Candidate code runs as the runner's user, so it can write into the baseline's venv between
rounds: the next rounds would measure a patched baseline. Each round that a venv baseline serves
is preceded by a look at every entry of its venv (lstat: type, permissions, size, inode, ctime,
which no process can set back); a change stops the A/B before that round, naming the path, and
the look after the last round covers the rounds' end. Each way of patching is tried."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from suite.core.errors import EnvironmentProblem
from suite.core.spec import CellSpec
from suite.execute.prepared import PreparedSide
from suite.flows.ab import venv_guard
from suite.flows.rounds import Rounds
from suite.judge.policy import load_policy

TORCH = "lib/python3.11/site-packages/torch/__init__.py"


def _venv(root: Path) -> Path:
    venv = root / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").write_text("#!/bin/sh\n")
    (venv / TORCH).parent.mkdir(parents=True)
    (venv / TORCH).write_text("__version__ = '2.13.0'\n")
    os.symlink("python", venv / "bin" / "python3")
    return venv


def _side(venv: Path, kind: str = "requirement") -> PreparedSide:
    return PreparedSide(
        spec="torch==2.13.0", label="2.13.0", interpreter=str(venv / "bin" / "python"),
        prepared_s=0.0, kind=kind,
    )  # fmt: skip


def _same_bytes_new_time(path: Path) -> None:
    """Patch the file in place (same size), then put its old modification time back
    (os.utime): only the ctime tells. A pause first, so that the patch's ctime is not within
    the file system clock's tick of the file's creation (a few ms; a round takes seconds)."""
    time.sleep(0.05)
    st = path.stat()
    path.write_text("__version__ = '2.13.0'  \n"[: len(path.read_text())])
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


PATCHES: dict[str, tuple[Callable[[Path], Any], str]] = {
    "rewritten, mtime put back": (lambda v: _same_bytes_new_time(v / TORCH), TORCH),
    "bytecode planted": (
        lambda v: (v / TORCH).with_suffix(".pyc").write_bytes(b"\0"),
        "torch/__init__.pyc added",
    ),
    "file removed": (lambda v: (v / TORCH).unlink(), f"{TORCH} missing"),
    "mode changed": (lambda v: (v / TORCH).chmod(0o777), TORCH),
    "renamed over": (
        lambda v: (
            (v / "x.py").write_text((v / TORCH).read_text()),
            os.replace(v / "x.py", v / TORCH),
        ),
        TORCH,
    ),
    "link retargeted": (
        lambda v: ((v / "bin" / "python3").unlink(), os.symlink("/bin/sh", v / "bin" / "python3")),
        "bin/python3",
    ),
}


@pytest.mark.parametrize("patch", sorted(PATCHES))
def test_each_way_of_patching_the_baseline_venv_is_seen(tmp_path: Path, patch: str) -> None:
    venv = _venv(tmp_path)
    guard = venv_guard(_side(venv))
    assert guard is not None
    guard()  # nothing changed yet
    do, named = PATCHES[patch]
    do(venv)
    with pytest.raises(EnvironmentProblem, match="changed while the A/B ran") as info:
        guard()
    assert named in str(info.value), str(info.value)


def test_only_a_venv_baseline_is_guarded(tmp_path: Path) -> None:
    assert venv_guard(_side(_venv(tmp_path), kind="current")) is None


@dataclass
class _Run:
    """One side's run on injected records; the candidate's patches the baseline's venv in the
    round given (what its workload's code could do)."""

    patch_in: int | None = None
    venv: Path | None = None
    rounds: dict[int, dict[str, Any]] = field(default_factory=dict)

    def reusable(self, spec: CellSpec, round_no: int) -> None:
        return None

    def discard(self, spec: CellSpec, round_no: int) -> None:
        self.rounds.pop(round_no, None)

    def execute(self, spec: CellSpec, round_no: int) -> tuple[dict[str, Any], bool]:
        if round_no == self.patch_in and self.venv is not None:
            (self.venv / TORCH).write_text("__version__ = '2.13.0'; import os\n")
        record = {
            "status": "ok", "round": round_no, "failure": None, "wall_s": 1.0,
            "harness": {"parent_wall_s": 1.0},
            "timing": {"samples_s": [0.01] * 40, "disturbance": {"disturbed": False}},
        }  # fmt: skip
        self.rounds[round_no] = record
        return record, False

    def records(self, spec: CellSpec) -> list[dict[str, Any]]:
        return [self.rounds[r] for r in sorted(self.rounds)]

    def spent_s(self) -> float:
        return float(len(self.rounds))


def test_no_round_runs_on_a_baseline_the_candidate_patched(tmp_path: Path) -> None:
    venv = _venv(tmp_path)
    policy = load_policy(None, "research")
    runs = {"baseline": _Run(), "candidate": _Run(patch_in=1, venv=venv)}
    guard = venv_guard(_side(venv))
    rounds = Rounds(runs, policy, policy.design.fixed(4), True, None, 0.0, guard)  # type: ignore[arg-type]
    spec = CellSpec(workload="w", ref="w", params=(), backend="cpu", profile="smoke")
    with pytest.raises(EnvironmentProblem, match=TORCH):
        rounds.run([spec])
    assert sorted(runs["baseline"].rounds) == [0, 1]  # round 2 never ran on it
    untouched = {"baseline": _Run(), "candidate": _Run()}
    ran = Rounds(untouched, policy, policy.design.fixed(4), True, None, 0.0, guard)  # type: ignore[arg-type]
    (venv / TORCH).write_text("__version__ = '2.13.0'\n")  # the check is against prepare time
    with pytest.raises(EnvironmentProblem):
        ran.run([spec])
