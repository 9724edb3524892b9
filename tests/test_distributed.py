"""Distributed cells under torchrun (2 CPU ranks, gloo): results from every rank, and a rank
that dies or hangs ends its own cell only."""

from __future__ import annotations

from pathlib import Path

import pytest

from suite.core.results import read_result, read_run
from tests.helpers import TESTS, cli

pytestmark = pytest.mark.slow
PLANTED = TESTS / "plugins" / "dist_planted.py"


@pytest.fixture(scope="module")
def dist_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[int, Path]:
    out = tmp_path_factory.mktemp("dist") / "run"
    matrix = out.parent / "m.yaml"
    matrix.write_text(
        "version: 1\nbackends: [cpu]\nworkloads:\n"
        f"  - workload: '{PLANTED}:RankCrash'\n"
        f"  - workload: '{PLANTED}:RankHang'\n    timeout: 30\n"
        f"  - workload: '{PLANTED}:AllReduce'\n"
        f"  - workload: '{PLANTED}:RankRaises'\n    timeout: 120\n"
    )
    code, _, _ = cli("run", "--matrix", str(matrix), "--out", str(out))
    return code, out


def test_every_rank_reports(dist_run: tuple[int, Path]) -> None:
    doc = read_result(dist_run[1] / "cells" / "all_reduce_ok@cpu.json")
    assert doc["status"] == "ok"
    assert [r["rank"] for r in doc["ranks"]] == [0, 1]
    assert all(r["metrics"]["sum"]["value"] == 3.0 for r in doc["ranks"])  # 1 + 2 over gloo
    assert all(r["peak_bytes"] is not None for r in doc["ranks"])
    assert doc["metrics"]["world_size"]["value"] == 2


def test_rank_crash_recorded_and_run_goes_on(dist_run: tuple[int, Path]) -> None:
    code, out = dist_run
    assert code == 1
    doc = read_result(out / "cells" / "rank_crash@cpu.json")
    assert doc["status"] == "crashed"
    assert "rank 1 died (SIGSEGV)" in doc["failure"]["message"]
    assert read_run(out / "run.json")["status"] == "complete"
    assert not list((out / "cells").glob(".*rank*"))  # no rank leaves a file of its part


def test_rank_hang_recorded_as_timeout(dist_run: tuple[int, Path]) -> None:
    doc = read_result(dist_run[1] / "cells" / "rank_hang@cpu.json")
    assert doc["status"] == "timeout"
    message = doc["failure"]["message"]
    assert "30s" in message
    # Each rank said its stacks before the stop: rank 1 sleeps outside the barrier rank 0 waits in.
    hang = doc["hang"]
    assert hang["never_arrived"] == [1] and hang["unheard"] == []
    ranks = {r["rank"]: r for r in hang["ranks"]}
    assert "time.sleep(3600)" in ranks[1]["top"] and "(main)" in ranks[1]["stacks"]
    assert ranks[0]["in_collective"] is True
    assert "rank 1 never reached the collective the others wait in" in message


def test_rank_exception_ends_the_cell_with_its_own_failure(dist_run: tuple[int, Path]) -> None:
    doc = read_result(dist_run[1] / "cells" / "rank_raises@cpu.json")
    assert doc["status"] == "failed"
    assert doc["failure"]["mode"] == "exception"
    # The failing rank's own exception ends the cell, not the process group's timeout.
    assert "rank 1 failed: planted: rank 1 gives up" in doc["failure"]["message"]
    assert "timed out" not in doc["failure"]["message"]


def test_a_part_cut_short_or_of_another_run_is_not_read() -> None:
    """A rank's part travels as a marked line of its output: a line cut short by a kill, or
    one left in the log by another run, says nothing about this cell."""
    import json

    from suite.core.wire import PART_MARK
    from suite.execute.cell import rank_failures

    part = {"run_id": "R", "rank": 1, "status": "failed", "failure": "boom", "mode": "exception"}
    other = {**part, "run_id": "OLD", "failure": "stale"}
    log = (
        f"noise\n{PART_MARK}{json.dumps(other)}\n[rank1]: {PART_MARK}{json.dumps(part)}\n"
        f'{PART_MARK}{{"run_id": "R", "rank": 0, "sta\n'
    )
    assert rank_failures([log], "R") == ("rank 1 failed: boom", "failed", "exception")
    assert rank_failures([log], "R", ["node 1 (10.0.0.2)"])[0] == (
        "rank 1 on node 1 (10.0.0.2) failed: boom"
    )


@pytest.mark.parametrize(
    ("part_status", "part_mode", "status", "mode"),
    [
        ("oom", "oom", "oom", "oom"),
        ("failed", "not-a-mode", "failed", "exception"),  # the status's own mode instead
        ("on-fire", "exception", "crashed", "exit-code"),  # not a status: the exit decides
    ],
)
def test_what_a_rank_says_enters_the_record_only_within_the_vocabulary(
    tmp_path: Path, part_status: str, part_mode: str, status: str, mode: str
) -> None:
    """A rank's part is read, not trusted: its status and mode become the cell's only when the
    record's vocabulary has them, so the record written is one its schema accepts."""
    import json

    from suite.core.spec import CellSpec
    from suite.core.validation import validate
    from suite.core.wire import PART_MARK
    from suite.execute.cell import _record_for_outcome
    from suite.execute.environment import RunOptions
    from suite.execute.launch import ProcessExit

    run_id = "20261204T000000Z-abcdef"
    spec = CellSpec("pair", "pair", (), "cpu", "smoke", ranks=2)
    result = tmp_path / "cells" / f"{spec.cell_id}.json"
    part = {"run_id": run_id, "rank": 1, "status": part_status, "failure": "planted",
            "mode": part_mode}  # fmt: skip
    log = tmp_path / "cell.log"
    log.write_text(f"{PART_MARK}{json.dumps(part)}\n")
    outcome = ProcessExit(returncode=1, signal_name=None, timed_out=False, wall_s=1.0,
                          maxrss_bytes=None)  # fmt: skip
    doc = _record_for_outcome(
        spec, run_id, 0, RunOptions(out=tmp_path), outcome, log, "2026-12-04T00:00:00Z", None
    )
    failure = doc["failure"]
    assert failure is not None
    assert (doc["status"], failure["mode"]) == (status, mode)
    assert f"rank 1 {part_status}: planted" in failure["message"]
    validate(dict(doc), "torch-matrix/result", file=str(result))


def test_a_cell_started_inside_another_jobs_world_runs_alone_and_says_so(tmp_path: Path) -> None:
    """A run started from a shell inside a Slurm step or a Kubeflow pod: the job's world
    variables reach no worker, and each record says what was left out."""
    import os
    import subprocess
    import sys

    from tests.helpers import REPO, THREADS_ENV, planted

    out = tmp_path / "run"
    matrix = tmp_path / "m.yaml"
    matrix.write_text(
        "version: 1\nbackends: [cpu]\nworkloads:\n"
        f"  - workload: '{planted('Quick')}'\n    grid: {{n: [8]}}\n"
        f"  - workload: '{PLANTED}:AllReduce'\n"
    )
    inherited = {"RANK": "3", "WORLD_SIZE": "8", "PET_NNODES": "2", "MASTER_ADDR": "10.9.9.9",
                 "MASTER_PORT": "1"}  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-m", "suite", "run", "--matrix", str(matrix), "--out", str(out)],
        cwd=REPO, env={**os.environ, **THREADS_ENV, **inherited}, capture_output=True,
        text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    alone = read_result(out / "cells" / "quick.8@cpu.json")
    assert alone["status"] == "ok"
    said = " ".join(alone["warnings"])
    assert "this cell ran alone, as rank 0 of a world of 1" in said
    assert "MASTER_ADDR, MASTER_PORT, PET_NNODES, RANK, WORLD_SIZE were not passed" in said
    pair = read_result(out / "cells" / "all_reduce_ok@cpu.json")
    assert pair["status"] == "ok" and pair["metrics"]["world_size"]["value"] == 2
    assert "this cell ran in its own world of 2 ranks" in " ".join(pair["warnings"])
