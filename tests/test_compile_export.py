"""The compile and export workloads, run for real through the CLI, with planted defects."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from typing import Any

import pytest

from suite.core.results import read_result
from tests.helpers import REPO, cli

pytestmark = pytest.mark.slow

COMPILE = "suite.workloads.compile:Compile"
EXPORT = "suite.workloads.export:Export"
PLANTED = "tests.plugins.compile_planted"

CELLS = {
    "compile": "compile.block.mark_dynamic.default.d64@cpu",
    "graph_break": "compile_graph_break.block.mark_dynamic.d64@cpu",
    "torch_export": "export.torch_export.block.d64@cpu",
    "onnx": "export.onnx.block.d64@cpu",
    "export_fails": "export_data_dependent.torch_export.block.d64@cpu",
}


@pytest.fixture(scope="module")
def records(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, dict[str, Any]]]:
    """One run of all the cells under test: each worker pays torch's compile warmup once."""
    out = tmp_path_factory.mktemp("compile_export") / "run"
    refs = [COMPILE, f"{PLANTED}:GraphBreakCompile", EXPORT, f"{PLANTED}:DataDependentExport"]
    args = ["run", "--backend", "cpu", "--out", str(out)]
    for ref in refs:
        args += ["--workload", ref]
    for cell in CELLS.values():
        args += ["--cell", cell]
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(REPO)  # the worker gets the caller's directory on sys.path, for the plants
        code, _, err = cli(*args)
    assert code == 1, err  # exactly the planted export failure fails the run
    yield {key: read_result(out / "cells" / f"{cell}.json") for key, cell in CELLS.items()}


def _metric(doc: dict[str, Any], name: str) -> Any:
    return doc["metrics"][name]["value"]


def test_compile_cell_records_compile_costs(records: dict[str, dict[str, Any]]) -> None:
    doc = records["compile"]
    assert doc["status"] == "ok", doc["failure"]
    assert "compile_warm_error" not in doc["metrics"]
    assert _metric(doc, "compile_cold_s") > 0
    assert _metric(doc, "compile_warm_s") > 0
    assert _metric(doc, "graph_breaks") == 0
    assert _metric(doc, "graph_count") == 1
    assert _metric(doc, "graph_break_reasons") == ""
    # The sequence dim is marked dynamic: one graph serves every length.
    assert _metric(doc, "unique_graphs") == 1
    assert _metric(doc, "recompiles") == 0
    assert _metric(doc, "speedup_vs_eager") > 0
    assert doc["timing"]["compile_s"] is not None
    assert doc["throughput"]["unit"] == "tokens/s"
    assert doc["correctness"]["passed"]
    assert doc["correctness"]["reference"] == "eager"


def test_planted_graph_break_is_reported(records: dict[str, dict[str, Any]]) -> None:
    doc = records["graph_break"]
    assert doc["status"] == "ok", doc["failure"]
    assert _metric(doc, "graph_breaks") >= 1
    assert _metric(doc, "graph_count") >= 2
    assert "graph_break" in _metric(doc, "graph_break_reasons")
    # The warm-cache child rebuilt the plant's model from its module:object reference.
    assert _metric(doc, "compile_warm_s") > 0


def test_torch_export_runs_at_two_shapes(records: dict[str, dict[str, Any]]) -> None:
    doc = records["torch_export"]
    assert doc["status"] == "ok", doc["failure"]
    assert _metric(doc, "shapes_checked") == 2
    assert _metric(doc, "max_abs_error") < 1e-4
    assert _metric(doc, "export_s") > 0
    assert doc["correctness"]["passed"]


def test_planted_export_failure_is_recorded(records: dict[str, dict[str, Any]]) -> None:
    doc = records["export_fails"]
    assert doc["status"] == "failed"
    assert doc["failure"]["mode"] == "exception"
    assert "data-dependent" in doc["failure"]["message"]


def test_onnx_exports_and_runs_in_onnxruntime(records: dict[str, dict[str, Any]]) -> None:
    doc = records["onnx"]
    if importlib.util.find_spec("onnxruntime") is None:
        pytest.skip("the export extra is not installed: pip install 'torch-matrix[export]'")
    assert doc["status"] == "ok", doc["failure"]
    assert doc["correctness"]["passed"]


def test_onnx_without_the_extra_is_skipped_with_the_install_hint(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import torch

    from suite.workloads import Skip
    from suite.workloads import export as export_workload

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "onnxruntime" else real(name, *a),
    )
    with pytest.raises(Skip) as info:
        export_workload._check_onnx_available(torch.device("cpu"))
    assert "pip install 'torch-matrix[export]'" in str(info.value)
    assert "missing: onnxruntime" in str(info.value)
