"""The CUDA-only cells, on a machine without CUDA: each path up to the device runs, and what
needs the device says so (`unsupported` or `skipped`, with the reason), never a failure."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from suite.core.results import read_result
from suite.worker.cell import run_cell
from suite.workloads.matrix import Entry, Matrix, expand


@pytest.fixture(autouse=True)
def _process_state(monkeypatch: pytest.MonkeyPatch) -> Any:
    """The worker runs in this process here: keep what a cell sets (environment variables,
    torch's deterministic-algorithms flag) from reaching the tests after it."""
    import torch

    for name in ("TORCHINDUCTOR_CACHE_DIR", "CUBLAS_WORKSPACE_CONFIG"):
        monkeypatch.setenv(name, "")  # recorded as it was, so that teardown restores it
        monkeypatch.delenv(name)
    flag = torch.are_deterministic_algorithms_enabled()
    yield
    torch.use_deterministic_algorithms(flag)


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


def test_the_cutedsl_cell_is_skipped_here_with_the_install_hint(tmp_path: Path) -> None:
    specs = _cells("cutedsl", {"dtype": ["fp32"]})
    (spec,) = specs
    assert spec.cell_id == "cutedsl.fp32.1024x1024@cpu"
    assert spec.lane == "prototype"  # the matrix entry said production
    doc = _run(tmp_path, spec)
    assert doc["status"] == "skipped"
    assert doc["failure"]["mode"] == "dependency"
    assert "NVIDIA GPUs" in doc["failure"]["message"]
    assert "pip install 'torch-matrix[cutedsl]'" in doc["failure"]["message"]


def test_without_the_package_the_cell_names_it(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    from suite.workloads.base import Skip
    from suite.workloads.cutedsl import _import_cute

    monkeypatch.setitem(sys.modules, "cutlass", None)
    monkeypatch.setitem(sys.modules, "cutlass.cute", None)
    with pytest.raises(Skip, match=r"CuTe DSL is not installed .*nvidia-cutlass-dsl"):
        _import_cute()


def test_a_failing_cutedsl_row_is_capped_at_isolate(tmp_path: Path) -> None:
    from suite.core.loaded import LoadedRun
    from suite.flows.compare import decide
    from suite.judge.policy import load_policy
    from tests.synthetic import Cell, make_run

    ok = Cell(workload="cutedsl", case="fp32", backend="cuda", lane="prototype")
    broken = Cell(
        workload="cutedsl", case="fp32", backend="cuda", lane="prototype", status="crashed",
        failure_mode="signal", message="SIGSEGV in the CuTe kernel",
    )  # fmt: skip
    b = make_run(tmp_path / "b", [ok], run_id="20261201T100000Z-aaaaaa")
    c = make_run(tmp_path / "c", [broken], run_id="20261201T100000Z-bbbbbb")
    # nightly-training's fleet is cuda: the same failure in production would be a rollback.
    decision = decide(LoadedRun.load(b), LoadedRun.load(c), load_policy(None, "nightly-training"))
    (row,) = decision["rows"]
    assert row["row_id"] == "cutedsl@cuda" and row["decision"] == "isolate"
    assert any("capped at isolate (prototype lane" in r for r in row["reasons"])
    assert decision["decision"] == "isolate"
