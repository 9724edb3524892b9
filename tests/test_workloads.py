"""Every built-in workload at smoke size on this machine's CPU: the default matrix, run once."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from suite.core.results import read_result, read_run
from tests.helpers import cli

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def default_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[int, Path]:
    out = tmp_path_factory.mktemp("default") / "run"
    code, _, _ = cli("run", "--out", str(out))
    return code, out


def _cells(out: Path) -> dict[str, dict]:
    run = read_run(out / "run.json")
    return {c["cell_id"]: read_result(out / c["file"]) for c in run["cells"]}


def test_default_run_completes_and_validates(default_run: tuple[int, Path]) -> None:
    code, out = default_run
    assert code == 0
    cells = _cells(out)
    assert {c["spec"]["workload"] for c in cells.values()} == {
        "flex_attention",
        "sdpa",
        "linear_cross_entropy",
        "mlp_train",
        "collectives",
        "fsdp2",
        "checkpoint",
        "recovery",
    }
    vcode, stdout, _ = cli("validate", str(out))
    assert vcode == 0 and stdout.count("ok  ") == len(cells) + 1


def test_every_cpu_cell_runs_or_is_unsupported_backward(default_run: tuple[int, Path]) -> None:
    for cell_id, doc in _cells(default_run[1]).items():
        if not cell_id.endswith("@cpu"):
            assert doc["status"] == "skipped", cell_id
            continue
        if (
            doc["spec"]["params"].get("pass") == "fwd_bwd"
            and doc["spec"]["workload"] == "flex_attention"
        ):
            assert doc["status"] == "unsupported", cell_id
            assert "FlexAttention does not support backward on CPU" in doc["failure"]["message"]
            continue
        if doc["spec"]["params"].get("api") == "torchcomms":  # not installed here
            assert doc["status"] == "skipped", cell_id
            assert "torchcomms" in doc["failure"]["message"], cell_id
            continue
        assert doc["status"] == "ok", (cell_id, doc["failure"])
        assert doc["correctness"]["passed"], cell_id
        assert doc["timing"]["summary"]["n"] >= 1 and doc["memory"] is not None


def test_compiled_cells_record_compile_apart(default_run: tuple[int, Path]) -> None:
    cells = _cells(default_run[1])
    compiled = [
        d
        for d in cells.values()
        if d["spec"]["params"].get("mode") == "compiled" and d["status"] == "ok"
    ]
    assert compiled
    for doc in compiled:
        assert doc["timing"]["compile_s"] == doc["timing"]["cold_start_s"]
        assert doc["timing"]["compile_s"] > doc["timing"]["summary"]["p50"]


def test_chunked_linear_cross_entropy_uses_less_memory(default_run: tuple[int, Path]) -> None:
    cells = _cells(default_run[1])
    peak = {
        d["spec"]["params"]["impl"]: d["memory"]["peak_bytes"]
        for d in cells.values()
        if d["spec"]["workload"] == "linear_cross_entropy" and d["spec"]["backend"] == "cpu"
    }
    assert peak["chunked"] < 0.5 * peak["reference"], json.dumps(peak)


def test_mlp_train_loss_falls(default_run: tuple[int, Path]) -> None:
    doc = next(
        d
        for d in _cells(default_run[1]).values()
        if d["spec"]["workload"] == "mlp_train" and d["spec"]["backend"] == "cpu"
    )
    assert doc["metrics"]["loss_after_n_steps"]["value"] < doc["metrics"]["initial_loss"]["value"]
