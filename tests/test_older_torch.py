"""On a torch without the newer APIs a workload uses (FlexAttention, LinearCrossEntropyLoss, or
anything a plugin reaches for), the cell is `unsupported` with the reason, never a crash or a
failure. The torch here is made to lack them by monkeypatching; the worker runs in-process."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest
import torch

from suite.core.results import read_result
from suite.worker.cell import lacks_torch_api, run_cell
from suite.workloads.matrix import select_cells

NEW_API_PLUGIN = """
from suite.workloads import CellContext, Workload


class NewApi(Workload):
    name = "new_api"

    def run(self, ctx: CellContext) -> None:
        import torch

        torch.nn.NotYetInTorch(8)  # an API of a later torch
"""


def _run(tmp_path: Path, ref: str, cell_id: str | None = None) -> dict[str, object]:
    _, cells, _ = select_cells(None, [ref], ["cpu"], [cell_id] if cell_id else [], "smoke")
    result = tmp_path / "result.json"
    assert run_cell(cells[0], "r1", 0, result, time.perf_counter()) == 0
    return read_result(result)


def test_a_torch_without_flex_attention_leaves_the_cell_unsupported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "torch.nn.attention.flex_attention", None)
    doc = _run(tmp_path, "flex_attention", "flex_attention.causal.none.eager.fp32.fwd.s512@cpu")
    assert doc["status"] == "unsupported", doc["failure"]
    failure = doc["failure"]
    assert isinstance(failure, dict)
    assert failure["mode"] == "unsupported"
    assert f"torch {torch.__version__} lacks" in failure["message"]
    assert "flex_attention" in failure["message"]


def test_a_torch_without_linear_cross_entropy_loss_leaves_the_cell_unsupported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delattr(torch.nn, "LinearCrossEntropyLoss", raising=False)
    _, cells, _ = select_cells(None, ["linear_cross_entropy"], ["cpu"], [], "smoke")
    chunked = next(c for c in cells if c.params_dict["impl"] == "chunked")
    doc = _run(tmp_path, "linear_cross_entropy", chunked.cell_id)
    assert doc["status"] == "unsupported"
    assert "LinearCrossEntropyLoss" in str(doc["failure"])


def test_a_plugin_reaching_for_a_later_api_is_unsupported_not_failed(tmp_path: Path) -> None:
    plugin = tmp_path / "new_api.py"
    plugin.write_text(NEW_API_PLUGIN)
    doc = _run(tmp_path, f"{plugin}:NewApi")
    assert doc["status"] == "unsupported", doc["failure"]
    assert "NotYetInTorch" in str(doc["failure"])


def test_only_torch_s_own_absences_count() -> None:
    assert lacks_torch_api(ModuleNotFoundError("x", name="torch.nn.attention.flex_attention"))
    assert not lacks_torch_api(ModuleNotFoundError("x", name="cutlass"))
    assert not lacks_torch_api(AttributeError("x"))  # a plain bug in the workload
    try:
        torch.nn.NotYetInTorch  # type: ignore[attr-defined]  # noqa: B018
    except AttributeError as exc:
        assert lacks_torch_api(exc)
    try:
        object().missing  # type: ignore[attr-defined]  # noqa: B018
    except AttributeError as exc:
        assert not lacks_torch_api(exc)
