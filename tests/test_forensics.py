"""Hang forensics read back: each rank's stacks said before the stop, the rank outside the
collective the others wait in named, and on CUDA the flight recorder's settings."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

from suite.core.spec import CellSpec
from suite.core.wire import STACKS_MARK
from suite.execute.forensics import flight_files, flight_recorder_env, hang_of, hang_text
from suite.worker.forensics import stacks_now


def _said(rank: int, in_collective: bool, top: str, run_id: str = "R") -> str:
    doc = {"run_id": run_id, "rank": rank, "node": 0, "in_collective": in_collective,
           "top": top, "stacks": f"Thread MainThread (main):\n  {top}\n"}  # fmt: skip
    return f"[rank{rank}]: {STACKS_MARK}{json.dumps(doc)}\n"


def test_the_rank_outside_the_collective_is_named_with_where_it_was() -> None:
    text = (
        "noise\n"
        + _said(0, True, "w.py:9 in run: dist.barrier()")
        + _said(1, False, "w.py:7 in run: time.sleep(3600)")
    )
    hang = hang_of([text], "R", 2)
    assert hang is not None
    assert hang["never_arrived"] == [1] and hang["unheard"] == []
    assert "time.sleep(3600)" in hang["ranks"][1]["stacks"]
    assert hang_text(hang) == (
        "rank 1 never reached the collective the others wait in "
        "(at w.py:7 in run: time.sleep(3600))"
    )


def test_ranks_all_waiting_or_silent_or_of_another_run() -> None:
    text = _said(0, True, "a") + _said(1, True, "b") + _said(2, False, "old", run_id="OLD")
    hang = hang_of([text], "R", 3)
    assert hang is not None and hang["never_arrived"] == [] and hang["unheard"] == [2]
    assert hang_text(hang) == (
        "every rank waits in a collective (rank 0 at a); no stacks from rank 2"
    )
    assert hang_of(["nothing said"], "R", 2) is None


def test_a_rank_says_its_own_main_thread_outside_any_collective() -> None:
    said: dict[str, Any] = {}  # the watchdog asks from a thread of its own, as here
    asker = threading.Thread(target=lambda: said.update(stacks_now()), name="asker")
    asker.start()
    asker.join()
    assert said["in_collective"] is False
    assert "test_a_rank_says_its_own_main_thread" in said["top"]
    assert "(main)" in said["stacks"] and "Thread asker" not in said["stacks"]


def test_the_flight_recorder_is_kept_on_cuda_cells_of_several_ranks(tmp_path: Path) -> None:
    spec = CellSpec("fsdp2", "fsdp2", (), "cuda", "smoke", ranks=2, distributed=True)
    env = flight_recorder_env(spec, tmp_path, "fsdp2.n1x2@cuda.r0")
    assert env["TORCH_NCCL_DUMP_ON_TIMEOUT"] == "1"
    assert int(env["TORCH_NCCL_TRACE_BUFFER_SIZE"]) > 0
    prefix = Path(env["TORCH_NCCL_DEBUG_INFO_TEMP_FILE"])
    cpu = CellSpec("fsdp2", "fsdp2", (), "cpu", "smoke", ranks=2, distributed=True)
    assert flight_recorder_env(cpu, tmp_path, "x") == {}
    prefix.parent.mkdir(parents=True)
    (prefix.parent / (prefix.name + "1")).write_bytes(b"dump")  # as torch names rank 1's
    assert flight_files(tmp_path, "fsdp2.n1x2@cuda.r0") == ["flight/fsdp2.n1x2@cuda.r0.rank1"]
    hang = hang_of([""], "R", 2, flight_files(tmp_path, "fsdp2.n1x2@cuda.r0"))
    assert hang is not None and "flight recorder: flight/" in hang_text(hang)


def test_the_comment_shows_the_hung_rank_and_the_top_of_its_stack(tmp_path: Path) -> None:
    from suite.core.loaded import LoadedRun
    from suite.flows.compare import decide
    from suite.judge.policy import load_policy
    from suite.report import render_markdown
    from suite.report.escape import md
    from tests.synthetic import Cell, make_run

    said = "rank 1 never reached the collective the others wait in (at w.py:7 in run: sleep(9))"
    hung = Cell(workload="fsdp2", status="timeout", failure_mode="timeout",
                message=f"no result within 30s; worker killed; {said}")  # fmt: skip
    b = make_run(tmp_path / "b", [Cell(workload="fsdp2")], run_id="20261130T100000Z-aaaaaa")
    c = make_run(tmp_path / "c", [hung], run_id="20261130T100000Z-bbbbbb")
    decision = decide(LoadedRun.load(b), LoadedRun.load(c), load_policy(None, "research"))
    section = render_markdown(decision).split("fsdp2.a@cpu", 1)[1]  # the cell's own section
    assert md(said) in section
