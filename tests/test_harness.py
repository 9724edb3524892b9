"""Failure is data: planted crashes, hangs, OOMs and exceptions each get the right record,
and the cells around them still complete."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from suite.core.results import read_result, read_run
from tests.helpers import cli, planted


@pytest.fixture(scope="module")
def planted_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[int, Path]:
    out = tmp_path_factory.mktemp("planted") / "run"
    # Hang needs a short timeout of its own: a matrix file gives it one.
    matrix = out.parent / "matrix.yaml"
    entries = "".join(
        f"  - workload: '{planted(n)}'\n"
        for n in ("Quick", "Segfault", "MemoryHog", "Raises", "Unsupported", "SelfKill")
    )
    matrix.write_text(
        f"version: 1\nbackends: [cpu]\nworkloads:\n{entries}"
        f"  - workload: '{planted('Hang')}'\n    timeout: 5\n"
    )
    code, _, _ = cli("run", "--matrix", str(matrix), "--out", str(out), "--memory-limit", "2")
    return code, out


def _record(out: Path, cell: str) -> dict:
    return read_result(out / "cells" / f"{cell}.json")


def test_run_goes_on_and_exits_1(planted_run: tuple[int, Path]) -> None:
    code, out = planted_run
    assert code == 1
    run = read_run(out / "run.json")
    assert run["status"] == "complete"
    statuses = {c["cell_id"]: c["status"] for c in run["cells"]}
    assert statuses == {
        "quick.8@cpu": "ok",
        "quick.16@cpu": "ok",
        "segfault@cpu": "crashed",
        "memory_hog@cpu": "oom",
        "raises@cpu": "failed",
        "not_here@cpu": "unsupported",
        "self_kill@cpu": "crashed",
        "hang@cpu": "timeout",
    }


def test_segfault_recorded_with_signal_and_traceback(planted_run: tuple[int, Path]) -> None:
    doc = _record(planted_run[1], "segfault@cpu")
    assert doc["failure"]["mode"] == "signal"
    assert doc["failure"]["signal"] == "SIGSEGV"
    assert "Fatal Python error" in doc["failure"]["stderr_tail"]
    assert "planted.py" in doc["failure"]["stderr_tail"]


def test_abort_recorded_as_crash(planted_run: tuple[int, Path]) -> None:
    doc = _record(planted_run[1], "self_kill@cpu")
    assert doc["failure"]["signal"] == "SIGABRT"


def test_hang_recorded_as_timeout(planted_run: tuple[int, Path]) -> None:
    doc = _record(planted_run[1], "hang@cpu")
    assert doc["failure"]["mode"] == "timeout"
    assert "5s" in doc["failure"]["message"]


def test_memory_exhaustion_recorded_as_oom(planted_run: tuple[int, Path]) -> None:
    doc = _record(planted_run[1], "memory_hog@cpu")
    assert doc["failure"]["mode"] == "oom"
    assert doc["failure"]["exception_type"] == "builtins.MemoryError"


def test_exception_recorded_with_message(planted_run: tuple[int, Path]) -> None:
    doc = _record(planted_run[1], "raises@cpu")
    assert doc["failure"]["mode"] == "exception"
    assert doc["failure"]["message"] == "planted failure: the workload raised"
    assert "ValueError" in doc["failure"]["stderr_tail"]


def test_not_implemented_is_unsupported_finding(planted_run: tuple[int, Path]) -> None:
    doc = _record(planted_run[1], "not_here@cpu")
    assert doc["status"] == "unsupported"
    assert doc["failure"]["message"] == "planted: this backend has no kernel for that"


def test_ok_cell_has_measurements(planted_run: tuple[int, Path]) -> None:
    doc = _record(planted_run[1], "quick.16@cpu")
    summary = doc["timing"]["summary"]
    assert summary["n"] == len(doc["timing"]["samples_s"]) >= 15
    assert summary["p50"] <= summary["p95"]
    assert doc["timing"]["cold_start_s"] is not None
    assert doc["noise"]["grade"] in ("ok", "noisy")
    assert doc["throughput"]["value"] == pytest.approx(16 / summary["p50"])
    assert doc["memory"]["method"] == "cpu-allocator"
    assert doc["correctness"]["passed"] is True
    assert doc["source"]["sha256"] and doc["source"]["file"].endswith("planted.py")


def test_absent_backend_is_skipped_with_reason(quick_run: Path) -> None:
    doc = read_result(quick_run / "cells" / "quick.8@cuda.json")
    assert doc["status"] == "skipped"
    assert (
        "not a CUDA build" in doc["failure"]["message"]
        or "is_available" in doc["failure"]["message"]
    )


def test_run_record_evidence(quick_run: Path) -> None:
    run = read_run(quick_run / "run.json")
    env = run["environment"]
    assert env["torch"]["version"] and env["cpu"]["model"]
    assert run["command"][0] == "torch-matrix"
    assert run["matrix"]["file"] == "<built-in default matrix>"
    ((ref, workload),) = run["workloads"].items()
    assert ref.endswith("planted.py:Quick") and len(workload["sha256"]) == 64


def test_existing_run_is_not_overwritten(quick_run: Path) -> None:
    before = (quick_run / "run.json").read_bytes()
    code, _, err = cli("run", "--workload", planted("Quick"), "--out", str(quick_run))
    assert code == 2
    assert "is not an empty folder" in err and "--resume" in err
    assert (quick_run / "run.json").read_bytes() == before


def test_resume_after_runner_killed(tmp_path: Path) -> None:
    """SIGKILL the runner mid-run; --resume completes it with no cell lost or duplicated."""
    out = tmp_path / "run"
    matrix = tmp_path / "m.yaml"
    matrix.write_text(
        "version: 1\nbackends: [cpu]\nworkloads:\n"
        f"  - workload: '{planted('Quick')}'\n    grid: {{n: [8, 16, 32]}}\n"
        f"  - workload: '{planted('Hang')}'\n    timeout: 120\n"
    )
    cmd = [sys.executable, "-m", "suite", "run", "--matrix", str(matrix), "--out", str(out)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    hang_log = out / "logs" / "hang@cpu.log"
    deadline = time.monotonic() + 120
    while not hang_log.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert hang_log.exists(), "runner never reached the hanging cell"
    first = {p.name: p.read_bytes() for p in (out / "cells").glob("*.json")}
    assert len(first) == 3
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    run = json.loads((out / "run.json").read_text())
    assert run["status"] == "running"

    matrix.write_text(matrix.read_text().replace("timeout: 120", "timeout: 2"))
    code, _, err = cli("run", "--matrix", str(matrix), "--out", str(out), "--resume")
    assert code == 1, err  # the hang times out
    run = read_run(out / "run.json")
    assert run["status"] == "complete" and len(run["resumed_at"]) == 1
    ids = [c["cell_id"] for c in run["cells"]]
    assert sorted(ids) == sorted(set(ids)) and len(ids) == 4
    files = sorted(p.name for p in (out / "cells").glob("*.json"))
    assert files == sorted(f"{i}.json" for i in ids)
    for name, content in first.items():  # kept, not rerun
        assert (out / "cells" / name).read_bytes() == content
    assert read_result(out / "cells" / "hang@cpu.json")["status"] == "timeout"
    assert "(resumed)" in err
