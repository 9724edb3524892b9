"""A killed A/B resumes: SIGKILL mid-round, between rounds and during the rollback checks, then
`ab --resume`. Every round exactly once, whole rounds kept byte for byte, no record corrupt,
and the decision the one the records give."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from suite.core.results import cell_file, disturbed, read_result
from suite.core.validation import validate_file
from tests.helpers import PLANTED, adopts_where_decided
from tests.plugins.resume_planted import HOLD_AT, HOLD_DIR

ROUNDS = 6
SIDES = ("baseline", "candidate")
CELL = "counted@cpu"
WORKLOAD = f"{PLANTED.parent / 'resume_planted.py'}:Counted"


def _ab(out: Path, *extra: str, rounds: int = ROUNDS) -> list[str]:
    return [
        sys.executable, "-m", "suite", "ab",
        "--candidate", "current",
        "--workload", WORKLOAD,
        "--backend", "cpu",
        "--rounds", str(rounds),
        "--no-traces",
        "--out", str(out),
        *extra,
    ]  # fmt: skip


def _records(out: Path, role: str) -> dict[int, Path]:
    found = {}
    for r in range(ROUNDS + 2):
        path = cell_file(out / role, CELL, r)
        if path.is_file():
            found[r] = path
    return found


def _kill_at(out: Path, hold_at: str, limit_s: float = 900.0) -> None:
    """Run the A/B until the worker at `hold_at` (FOLDER:ROUND) holds, then SIGKILL the A/B."""
    hold = out.parent / "hold"
    hold.mkdir()
    env = {**os.environ, HOLD_DIR: str(hold), HOLD_AT: hold_at}
    proc = subprocess.Popen(_ab(out), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    deadline = time.monotonic() + limit_s
    try:
        while not (hold / "holding").exists():
            if proc.poll() is not None:
                pytest.fail(f"ab finished (exit {proc.returncode}) before the kill point")
            if time.monotonic() > deadline:
                pytest.fail("the kill point never came")
            time.sleep(0.01)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(30)


# Where each case kills the A/B. Round r runs baseline then candidate when r is even, the other
# way round when odd; after the rounds, the rollback rehearsal runs the cell once more.
MID_ROUND = "candidate:2"  # round 2's second side: the baseline's record is in
BETWEEN = "baseline:4"  # round 4's first side: rounds 0-3 whole, nothing of round 4 written
ROLLBACK = "rehearsal:0"  # the rehearsal, after every round and the checkpoint checks


def _no_stray_processes(out: Path) -> None:
    """No worker or fork server of the killed A/B is left behind (they die with it)."""
    deadline = time.monotonic() + 10
    while True:
        alive = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if str(out) in cmd or (
                "suite.execute.forkserver" in cmd and str(out) in _environ(entry)
            ):
                alive.append(cmd)
        if not alive or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert alive == []


def _environ(entry: Path) -> str:
    try:
        return (entry / "environ").read_bytes().decode(errors="replace")
    except OSError:
        return ""


@pytest.mark.parametrize(
    ("hold_at", "whole_rounds"),
    [(MID_ROUND, 2), (BETWEEN, 4), (ROLLBACK, ROUNDS)],
    ids=["mid-round", "between-rounds", "rollback"],
)
def test_killed_ab_resumes_every_round_once(
    tmp_path: Path, hold_at: str, whole_rounds: int
) -> None:
    out = tmp_path / "ab"
    _kill_at(out, hold_at)
    _no_stray_processes(out)
    base, cand = _records(out, "baseline"), _records(out, "candidate")
    assert sorted(base.keys() & cand.keys()) == list(range(whole_rounds))
    if hold_at == MID_ROUND:
        assert 2 in base and 2 not in cand  # half a round: redone on both sides
    if hold_at == ROLLBACK:
        assert (out / "rollback").is_dir() and not (out / "decision.json").exists()
    whole = sorted(base.keys() & cand.keys())
    kept = {
        (role, r): cell_file(out / role, CELL, r).read_bytes()
        for r in whole
        for role in ("baseline", "candidate")
    }
    for path in (out / "baseline" / "run.json", out / "candidate" / "run.json"):
        status = json.loads(path.read_text())["status"]
        assert status == ("complete" if hold_at == ROLLBACK else "running")  # SIGKILL: no word

    # A resume under another design is refused, with the file and the field named.
    refused = subprocess.run(
        _ab(out, "--resume", rounds=4),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert refused.returncode == 2, refused.stderr
    assert "run.json::$.ab.identity.looks" in refused.stderr

    done = subprocess.run(_ab(out, "--resume"), capture_output=True, text=True, timeout=600)
    assert done.returncode in (0, 5), done.stderr[-3000:]

    for role in ("baseline", "candidate"):
        records = _records(out, role)
        assert sorted(records) == list(range(ROUNDS)), role  # every round exactly once
        for r, path in records.items():
            assert validate_file(path) == "torch-matrix/result"
            assert json.loads(path.read_text())["round"] == r
        run = json.loads((out / role / "run.json").read_text())
        assert run["status"] == "complete" and len(run["resumed_at"]) == 1
        entries = [(c["cell_id"], c["round"]) for c in run["cells"]]
        assert sorted(entries) == sorted((CELL, r) for r in range(ROUNDS))
    for (role, r), data in kept.items():  # whole rounds kept byte for byte
        assert cell_file(out / role, CELL, r).read_bytes() == data

    decision = json.loads((out / "decision.json").read_text())
    adopts_where_decided(done.returncode, decision)
    rollback = [g for c in decision["cells"] if c["workload"] == "rollback" for g in c["gates"]]
    assert rollback and {g["verdict"] for g in rollback} == {"pass"}
    latency = next(
        g for c in decision["cells"] if c["cell_id"] == CELL for g in c["gates"]
        if g["gate"] == "latency_p50"
    )  # fmt: skip
    # Every whole round reaches the latency gate but those another process disturbed on either
    # side, which it leaves out and says so: all six on a quiet machine, fewer on a busy one.
    calm = [
        r for r in range(ROUNDS)
        if not any(disturbed(read_result(cell_file(out / side, CELL, r))) for side in SIDES)
    ]  # fmt: skip
    assert latency.get("rounds", 0) == len(calm), latency["message"]

    # The decision is the one the records give: judged again from the two run directories.
    again = subprocess.run(
        [
            sys.executable,
            "-m",
            "suite",
            "compare",
            str(out / "baseline"),
            str(out / "candidate"),
            "--format",
            "json",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    rejudged = json.loads(again.stdout)
    pick = lambda d: [  # noqa: E731
        (c["cell_id"], g["gate"], g["verdict"], g.get("change"))
        for c in d["cells"] if c["workload"] != "rollback" for g in c["gates"]
    ]  # fmt: skip
    assert pick(rejudged) == pick(decision)
