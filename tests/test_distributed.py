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
        f"  - workload: '{PLANTED}:RankHang'\n    timeout: 15\n"
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
    assert not list((out / "cells").glob(".*rank*"))  # rank parts cleaned up


def test_rank_hang_recorded_as_timeout(dist_run: tuple[int, Path]) -> None:
    doc = read_result(dist_run[1] / "cells" / "rank_hang@cpu.json")
    assert doc["status"] == "timeout"
    assert "15s" in doc["failure"]["message"]


def test_rank_exception_ends_the_cell_with_its_own_failure(dist_run: tuple[int, Path]) -> None:
    doc = read_result(dist_run[1] / "cells" / "rank_raises@cpu.json")
    assert doc["status"] == "failed"
    assert doc["failure"]["mode"] == "exception"
    # The failing rank's own exception ends the cell, not the process group's timeout.
    assert "rank 1 failed: planted: rank 1 gives up" in doc["failure"]["message"]
    assert "timed out" not in doc["failure"]["message"]


def test_a_part_left_half_written_by_a_killed_rank_is_removed(tmp_path: Path) -> None:
    """torchrun kills the other ranks when one dies: a rank killed inside atomic_write_json
    leaves its temporary file, which the parent removes with the parts it read."""
    from suite.core.results import atomic_write_json
    from suite.execute.cell import _rank_failures
    from suite.worker.ranks import rank_part_path

    result = tmp_path / "cells" / "rank_crash@cpu.json"
    part = {"rank": 1, "status": "failed", "failure": "boom", "mode": "exception"}
    atomic_write_json(rank_part_path(result, 1), part)
    half = result.parent / f".{rank_part_path(result, 0).name}.k1ll3d.tmp"  # mkstemp's shape
    half.write_text('{"rank": 0, "sta')
    said, status, mode = _rank_failures(result)
    assert (said, status, mode) == ("rank 1 failed: boom", "failed", "exception")
    assert list(result.parent.iterdir()) == []


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
    """A part file is read, not trusted: its status and mode become the cell's only when the
    record's vocabulary has them, so the record written is one its schema accepts."""
    from suite.core.results import atomic_write_json
    from suite.core.spec import CellSpec
    from suite.core.validation import validate
    from suite.execute.cell import _record_for_outcome
    from suite.execute.environment import RunOptions
    from suite.execute.launch import ProcessExit
    from suite.worker.ranks import rank_part_path

    spec = CellSpec("pair", "pair", (), "cpu", "smoke", ranks=2)
    result = tmp_path / "cells" / f"{spec.cell_id}.json"
    part = {"rank": 1, "status": part_status, "failure": "planted", "mode": part_mode}
    atomic_write_json(rank_part_path(result, 1), part)
    log = tmp_path / "cell.log"
    log.write_text("")
    outcome = ProcessExit(returncode=1, signal_name=None, timed_out=False, wall_s=1.0,
                          maxrss_bytes=None)  # fmt: skip
    doc = _record_for_outcome(
        spec, "20261204T000000Z-abcdef", 0, RunOptions(out=tmp_path), outcome, log,
        "2026-12-04T00:00:00Z", None, result,
    )  # fmt: skip
    failure = doc["failure"]
    assert failure is not None
    assert (doc["status"], failure["mode"]) == (status, mode)
    assert f"rank 1 {part_status}: planted" in failure["message"]
    validate(dict(doc), "torch-matrix/result", file=str(result))
