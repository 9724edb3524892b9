"""Exposed communication: communication spans on the profiler's timeline minus their overlap
with compute. A planted blocking all-reduce after every layer reads more of it than FSDP2's own
overlapped path."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from suite.workloads.fsdp2 import exposed_us
from tests.helpers import TESTS, cli


def _event(name: str, start: float, end: float, thread: int = 1, device: str = "CPU") -> object:
    return SimpleNamespace(
        name=name, time_range=SimpleNamespace(start=start, end=end), thread=thread,
        device_type=f"DeviceType.{device}",
    )  # fmt: skip


def test_communication_that_compute_overlaps_is_not_exposed() -> None:
    events = [
        _event("FSDP::all_gather", 0, 100),  # 100 us of communication
        _event("aten::addmm", 40, 70, thread=2),  # compute beside it on another thread
        _event("aten::copy_", 10, 20),  # copy-in inside the range: communication
        _event("aten::mm", 150, 200),  # compute alone
        _event("gloo:all_reduce", 180, 260, thread=3),  # half hidden behind the mm
    ]
    # 100 - 30 hidden, then 80 - 20 hidden
    assert exposed_us(events) == pytest.approx(70 + 60)
    assert exposed_us([_event("aten::mm", 0, 10)]) == 0.0


def test_on_a_gpu_nccl_kernels_are_hidden_only_by_other_kernels() -> None:
    events = [
        _event("ncclDevKernel_AllGather", 0, 100, device="CUDA"),
        _event("sm90_gemm", 50, 100, device="CUDA"),  # another stream's kernel
        _event("aten::mm", 0, 50, thread=7),  # host compute counts as compute too
    ]
    assert exposed_us(events[:2]) == pytest.approx(50)
    assert exposed_us(events) == 0.0


@pytest.mark.slow
def test_a_blocking_all_reduce_after_each_layer_reads_more_exposed_communication(
    tmp_path: Path,
) -> None:
    plugin = TESTS / "plugins" / "dist_planted.py"
    matrix = tmp_path / "m.yaml"
    grid = "    grid: {reshard_after_forward: [true]}\n"
    matrix.write_text(
        "version: 1\nbackends: [cpu]\nworkloads:\n"
        f"  - workload: fsdp2\n{grid}  - workload: '{plugin}:BlockingFsdp2'\n{grid}"
    )
    out = tmp_path / "run"
    code, _, err = cli("run", "--matrix", str(matrix), "--out", str(out))
    assert code == 0, err
    exposed = {}
    for name in ("fsdp2", "fsdp2_blocking"):
        doc = json.loads((out / "cells" / f"{name}.true.d256.n1x2@cpu.json").read_text())
        assert doc["status"] == "ok", doc["failure"]
        exposed[name] = doc["metrics"]["comm_exposed_s_per_step"]["value"]
        per_rank = [r["metrics"]["comm_exposed_s_per_step"]["value"] for r in doc["ranks"]]
        assert exposed[name] == max(per_rank) > 0  # the worst rank's
    assert exposed["fsdp2_blocking"] > exposed["fsdp2"], exposed
