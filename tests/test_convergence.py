"""Loss curves across pins: the convergence gate compares a seeded training run's loss at each
step between the sides (with an fp64 curve to tell rounding from divergence), and a cell names
its model, so that two sides that built different models are told apart."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import Any

import pytest
import torch

from suite.core.loaded import LoadedRun
from suite.judge.convergence import convergence_gate
from suite.judge.models import model_differences, models_line
from suite.judge.policy import Gate
from suite.worker.identity import finite_or_none, model_record
from tests.helpers import TESTS, cli

GATE = Gate(name="convergence", severity="hard", threshold=0.02)
PLUGIN = f"{TESTS / 'plugins' / 'planted_train.py'}:PlantedTrain"


def _rec(values: list[float | None], reference: list[float] | None = None) -> dict[str, Any]:
    return {"loss_curve": {"values": values, "reference": reference}}


def _verdict(base: dict[str, Any], cand: dict[str, Any]) -> tuple[str, str]:
    out = convergence_gate(GATE, [base], [cand])
    assert out is not None
    return out["verdict"], out["message"]


def test_curves_within_the_threshold_pass_and_beyond_it_fail_at_the_step_that_moved() -> None:
    base = [2.0, 1.5, 1.2, 1.0]
    assert _verdict(_rec(base), _rec([2.0, 1.5, 1.21, 1.005]))[0] == "pass"  # 0.83% at most
    verdict, message = _verdict(_rec(base), _rec([2.0, 1.5, 1.2, 1.05]))
    assert verdict == "fail"
    assert "5% at step 3 (1 → 1.05)" in message and "final loss 1 → 1.05" in message
    record = convergence_gate(GATE, [_rec(base)], [_rec([2.0, 1.5, 1.2, 1.05])])
    assert record is not None and record["change"] == pytest.approx(0.05)


def test_an_fp64_curve_tells_rounding_from_divergence() -> None:
    truth = [2.0, 1.5, 1.2, 1.0]
    base = [2.0, 1.5, 1.2, 0.96]  # 4% off the fp64 curve at the end: a coarse dtype
    # 5% from the baseline but nearer the truth: rounds differently, no worse.
    assert _verdict(_rec(base, truth), _rec([2.0, 1.5, 1.2, 1.01]))[0] == "pass"
    # Further from the truth than twice the baseline's distance: diverged.
    verdict, message = _verdict(_rec(base, truth), _rec([2.0, 1.5, 1.2, 1.1]))
    assert verdict == "fail" and "beyond 0.02" in message


def test_a_nan_loss_fails_and_a_missing_or_uneven_curve_is_untested() -> None:
    verdict, message = _verdict(_rec([2.0, 1.0]), _rec([2.0, None]))
    assert verdict == "fail" and "nan at step 1" in message
    assert _verdict(_rec([2.0, 1.0]), {})[0] == "untested"
    assert "no loss curve on the baseline side" in _verdict({}, _rec([2.0]))[1]
    assert _verdict(_rec([2.0, 1.0]), _rec([2.0]))[0] == "untested"
    assert _verdict(_rec([None, 1.0]), _rec([2.0, 1.0]))[0] == "untested"
    assert convergence_gate(GATE, [{}], [{}]) is None  # the workload records no curve


def test_a_curve_keeps_nan_as_null_and_a_model_is_named_by_its_config() -> None:
    assert finite_or_none([1.0, math.nan, math.inf, torch.tensor(0.5)]) == [1.0, None, None, 0.5]
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Linear(3, 2))
    model[1].weight.requires_grad_(False)

    class Config:
        def to_dict(self) -> dict[str, Any]:
            return {"hidden": 3, "act": torch.nn.Tanh}

    record = model_record(model, Config())
    assert record["class"] == "torch.nn.modules.container.Sequential"
    assert (record["parameters"], record["trainable_parameters"]) == (23, 17)
    assert record["dtypes"] == ["float32"] and record["config"]["hidden"] == 3
    assert "Tanh" in record["config"]["act"]  # a class reduced to its repr
    other = model_record(model, {"hidden": 4})
    assert other["config_sha256"] != record["config_sha256"]
    assert "config" not in model_record(model)


def _run(results: dict[str, list[dict[str, Any]]]) -> LoadedRun:
    return LoadedRun("side", Path("."), {}, results)  # type: ignore[arg-type]


def test_a_model_that_differs_between_the_sides_is_named() -> None:
    a = {"class": "m.Llama", "parameters": 1000, "dtypes": ["float32"], "config_sha256": "a" * 64}
    b = {**a, "parameters": 1200, "config_sha256": "b" * 64}
    base = _run({"x@cpu": [{"model": a}], "y@cpu": [{"model": a}], "z@cpu": [{}]})
    cand = _run({"x@cpu": [{"model": b}], "y@cpu": [{"model": a}], "z@cpu": [{"model": b}]})
    diffs = model_differences(base, cand)
    assert diffs == ["x@cpu: parameters 1,000 → 1,200, config aaaaaaaaaaaa → bbbbbbbbbbbb"]
    assert models_line(diffs).endswith(diffs[0])


def _venv(path: Path, plant: bool) -> str:
    """A venv that sees this interpreter's packages; the planted one sets TM_PLANTED_LR_SCALE
    at start-up from a .pth file, as a torch whose optimizer update went wrong would."""
    subprocess.run(
        [sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(path)],
        check=True,
    )
    if plant:
        site = Path(sysconfig.get_path("purelib", vars={"base": str(path), "platbase": str(path)}))
        (site / "tm_plant.pth").write_text(
            "import os; os.environ.setdefault('TM_PLANTED_LR_SCALE', '1.3')\n"
        )
    return str(path / "bin" / "python")


@pytest.mark.xdist_group("ab")
def test_a_planted_optimizer_regression_fails_convergence_where_one_step_passes(
    tmp_path: Path,
) -> None:
    out = tmp_path / "ab"
    cli(
        "ab", "--baseline", _venv(tmp_path / "base", False),
        "--candidate", _venv(tmp_path / "cand", True), "--workload", PLUGIN,
        "--rounds", "1", "--no-count", "--out", str(out),
    )  # fmt: skip
    decision = json.loads((out / "decision.json").read_text())
    (cell,) = [c for c in decision["cells"] if c["cell_id"] == "planted_train.10@cpu"]
    verdicts = {g["gate"]: g for g in cell["gates"]}
    assert verdicts["correctness"]["verdict"] == "pass"  # the seeded forward is the same
    assert verdicts["convergence"]["verdict"] == "fail", verdicts["convergence"]
    assert "largest step difference" in verdicts["convergence"]["message"]
    assert decision["decision"] == "rollback"  # a hard gate of the research profile
    # The cell's record (a round another process disturbed is set aside and run again: the
    # folder of set-aside records may hold more of them, all alike).
    doc = next(
        json.loads(p.read_text())
        for p in sorted((out / "candidate" / "cells").glob("*.json"))
        if '"loss_curve"' in p.read_text()
    )
    assert len(doc["loss_curve"]["values"]) == 10 and doc["model"]["parameters"] == 676
    assert not any("the model differs" in r for r in decision["reasons"])  # same model
    assert cell["model"]["parameters"] == 676 and len(cell["loss_curves"]["candidate"]) == 10
    report = (out / "decision.md").read_text()
    assert "Model: `torch.nn.modules.container.Sequential`, 676 parameters" in report
    assert "Loss per step (10 steps):" in report
