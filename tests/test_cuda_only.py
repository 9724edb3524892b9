"""The CUDA-only cells, on a machine without CUDA: each path up to the device runs, and what
needs the device says so (`unsupported` or `skipped`, with the reason), never a failure."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from suite.core.matrix import Entry, Matrix, expand
from suite.core.results import read_result
from suite.worker.cell import run_cell


def _cells(workload: str, grid: dict[str, list[Any]]) -> list[Any]:
    matrix = Matrix(
        name="cuda-only", file="<test>", sha256="0" * 64, profile="smoke", backends=("cpu",),
        timeout_s=300.0, entries=[Entry(workload, "production", grid, None, None, 0)],
    )  # fmt: skip
    return expand(matrix)[0]


def _run(tmp_path: Path, spec: Any) -> dict[str, Any]:
    result = tmp_path / f"{spec.cell_id}.json"
    assert run_cell(spec, "r1", 0, result, time.perf_counter()) == 0
    return read_result(result)


def test_reduce_overhead_compile_is_unsupported_without_cuda(tmp_path: Path) -> None:
    (spec,) = _cells("compile", {"mode": ["reduce-overhead"], "dynamic": ["default"]})
    assert spec.cell_id == "compile.block.default.reduce-overhead.d64@cpu"
    doc = _run(tmp_path, spec)
    assert doc["status"] == "unsupported"
    assert "CUDA graphs" in doc["failure"]["message"]


@pytest.mark.parametrize("algorithms", ["deterministic", "default"])
def test_scatter_add_is_bitwise_reproducible_on_the_cpu_either_way(
    tmp_path: Path, algorithms: str
) -> None:
    (spec,) = _cells("determinism", {"target": ["scatter_add"], "algorithms": [algorithms]})
    doc = _run(tmp_path, spec)
    assert doc["status"] == "ok", doc["failure"]
    metrics = {k: v["value"] for k, v in doc["metrics"].items()}
    assert metrics["deterministic_cross_process"] is True
    assert metrics["deterministic_algorithms"] is (algorithms == "deterministic")
    # table, x: the index_select backward and the index_add forward both produce gradients
    assert metrics["tensors_compared"] == 3
