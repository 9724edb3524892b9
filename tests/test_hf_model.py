"""The built-in model lane: hf_model builds Hugging Face architectures from small configs and runs
them on both pins — inference with torch.export, a training step with its loss curve — and a
side without transformers skips the cell saying how to give it one."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest

from suite.judge.rules import EXIT_CODES
from suite.workloads import Skip, resolve
from suite.workloads.hf_model import INSTALL, HfModel
from tests.helpers import cli


def test_a_side_without_transformers_skips_with_the_install_hint(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "transformers" else real(name)
    )
    ctx: Any = None  # the check comes before the context is touched
    with pytest.raises(Skip, match=r"pip install 'torch-matrix\[models\]'"):
        HfModel().run(ctx)
    assert "--with transformers" in INSTALL
    assert resolve("hf_model").workload.name == "hf_model"  # a built-in, outside the default matrix


def _matrix(tmp_path: Path) -> Path:
    matrix = tmp_path / "models.yaml"
    matrix.write_text(
        "version: 1\nname: models\nbackends: [cpu]\nworkloads:\n"
        "  - workload: hf_model\n    grid: {model: [llama], task: [infer]}\n"
        "  - workload: hf_model\n    grid: {model: [bert], task: [train]}\n"
    )
    return matrix


@pytest.mark.slow
@pytest.mark.xdist_group("ab")
def test_hf_model_runs_its_cells_on_both_pins_and_decides(tmp_path: Path) -> None:
    import torch

    if not torch.__version__.startswith("2.13.0"):
        pytest.skip(f"the baseline here is torch {torch.__version__}, not 2.13.0")
    version = importlib.metadata.version("transformers")  # the [models] extra, installed by CI
    out = tmp_path / "ab"
    code, stdout, err = cli(
        "ab", "--candidate", "torch==2.14.1", "--with", f"transformers=={version}",
        "--matrix", str(_matrix(tmp_path)), "--rounds", "1", "--no-count", "--no-traces",
        "--out", str(out), "--format", "json",
    )  # fmt: skip
    decision = json.loads(stdout)
    assert code == EXIT_CODES[decision["decision"]], err
    assert decision["candidate"]["torch"].startswith("2.14.1")
    cells = {c["cell_id"]: c for c in decision["cells"] if c["workload"] == "hf_model"}
    assert len(cells) == 2, sorted(cells)  # each model, each task: llama infers, bert trains
    rows = {c["row_id"] for c in cells.values()}
    assert rows == {"hf_model.llama@cpu", "hf_model.bert@cpu"}
    for cell_id, cell in cells.items():
        assert (cell["baseline_status"], cell["candidate_status"]) == ("ok", "ok"), cell
        gates = {g["gate"]: g for g in cell["gates"]}
        assert cell["model"]["parameters"] > 10_000 and cell["model"]["config_sha256"]
        if ".train." in cell_id:  # a training step is judged by its curve
            assert gates["convergence"]["verdict"] in ("pass", "fail"), gates["convergence"]
            assert len(cell["loss_curves"]["candidate"]) == 10
        else:  # inference: against the eager attention path, and through torch.export
            assert gates["correctness"]["verdict"] in ("pass", "fail"), gates["correctness"]
            assert gates["export"]["verdict"] in ("pass", "new-failure", "fail", "fixed")
    assert not [r for r in decision["reasons"] if "the model differs" in r]
    # Both sides ran the same transformers. What else the current interpreter holds and a fresh
    # venv does not (numpy, pillow, scipy, which transformers imports where present) is listed.
    differing = {p["name"] for p in decision["comparable"].get("packages", [])}
    assert "transformers" not in differing and "torch" not in differing
