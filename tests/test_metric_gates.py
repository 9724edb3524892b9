"""Compile, export, determinism and drift gates: planted regressions fail with their reason."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from suite.core.loaded import LoadedRun
from suite.flows.compare import decide
from suite.judge.policy import load_policy
from tests.helpers import REPO, cli
from tests.synthetic import Cell, make_run


def _m(**values: Any) -> dict[str, Any]:
    return {k: {"value": v, "unit": None} for k, v in values.items()}


def _gate(
    tmp_path: Path, base: list[Cell], cand: list[Cell], gate: str, profile: str = "research"
) -> dict[str, Any]:
    b = make_run(tmp_path / "b", base, run_id="20261130T100000Z-aaaaaa", rounds=1)
    c = make_run(tmp_path / "c", cand, run_id="20261130T100000Z-bbbbbb", rounds=1)
    decision = decide(LoadedRun.load(b), LoadedRun.load(c), load_policy(None, profile))
    gates = decision["cells"][0]["gates"]
    return next(g for g in gates if g["gate"] == gate) | {"_decision": decision["decision"]}


def test_planted_graph_break_fails_with_reason(tmp_path: Path) -> None:
    base = Cell(workload="compile", metrics=_m(graph_breaks=0, graph_break_reasons=""))
    cand = Cell(
        workload="compile",
        metrics=_m(
            graph_breaks=1,
            graph_break_reasons="Tensor.item() call with capture_scalar_outputs=False",
        ),
    )
    g = _gate(tmp_path, [base], [cand], "graph_breaks")
    assert g["verdict"] == "fail"
    assert "graph_breaks grew 0 -> 1" in g["message"] and "Tensor.item()" in g["message"]
    assert g["_decision"] == "defer"


def test_planted_recompile_fails(tmp_path: Path) -> None:
    base = Cell(workload="compile", metrics=_m(recompiles=0, recompile_reasons=""))
    cand = Cell(
        workload="compile", metrics=_m(recompiles=4, recompile_reasons="size mismatch at index 1")
    )
    g = _gate(tmp_path, [base], [cand], "recompiles")
    assert g["verdict"] == "fail" and "recompiles grew 0 -> 4" in g["message"]
    assert "size mismatch at index 1" in g["message"]
    same = _gate(tmp_path / "2", [base], [base], "recompiles")
    assert same["verdict"] == "pass"


def test_compile_time_growth(tmp_path: Path) -> None:
    base = Cell(workload="compile", metrics=_m(compile_cold_s=10.0, compile_warm_s=2.0))
    cand = Cell(workload="compile", metrics=_m(compile_cold_s=20.0, compile_warm_s=3.0))
    g = _gate(tmp_path, [base], [cand], "compile_time", profile="nightly-training")
    # Judged like every timing gate: paired rounds, and one round never decides.
    assert g["verdict"] == "inconclusive" and g["undecided"] == "rounds"
    assert g["change"] == pytest.approx(1.0) and g["rounds"] == 1


def test_failing_export_path(tmp_path: Path) -> None:
    ok = Cell(workload="export", case="aoti", metrics=_m(max_abs_error=1e-6))
    broken = Cell(
        workload="export",
        case="aoti",
        status="failed",
        failure_mode="exception",
        message="AOTInductor: could not compile the package",
    )
    b = make_run(tmp_path / "b", [ok], run_id="20261130T100000Z-aaaaaa", rounds=1)
    c = make_run(tmp_path / "c", [broken], run_id="20261130T100000Z-bbbbbb", rounds=1)
    for run_dir in (b, c):  # the export gate reads the path parameter
        for f in (run_dir / "cells").glob("*.json"):
            f.write_text(f.read_text().replace('"case": "aoti"', '"path": "aoti"'))
    decision = decide(LoadedRun.load(b), LoadedRun.load(c), load_policy(None, "inference-service"))
    g = next(g for g in decision["cells"][0]["gates"] if g["gate"] == "export")
    assert g["verdict"] == "new-failure" and "could not compile the package" in g["message"]
    assert decision["decision"] in ("defer", "rollback")
    assert any("required path" in r or "hard gate" in r for r in decision["reasons"])


def test_drift_between_pins(tmp_path: Path) -> None:
    def with_outputs(run_dir: Path, scale: float) -> None:
        tensors = {"output": torch.linspace(-1, 1, 100) * scale}
        (run_dir / "tensors").mkdir()
        torch.save(tensors, run_dir / "tensors" / "w.a@cpu.pt")
        for f in (run_dir / "cells").glob("*.json"):
            text = f.read_text().replace(
                '"warnings": []',
                '"warnings": [], "outputs": {"file": "tensors/w.a@cpu.pt", "tensors": {"output": '
                '{"shape": [100], "dtype": "float32", "sha256": "x", "abs_max": 1.0, "mean": 0.0, '
                '"sampled": false}}}',
            )
            f.write_text(text)

    b = make_run(tmp_path / "b", [Cell()], run_id="20261130T100000Z-aaaaaa", rounds=1)
    c = make_run(tmp_path / "c", [Cell()], run_id="20261130T100000Z-bbbbbb", rounds=1)
    with_outputs(b, 1.0)
    with_outputs(c, 1.001)
    policy = load_policy(None, "nightly-training")
    g = next(
        g
        for g in decide(LoadedRun.load(b), LoadedRun.load(c), policy)["cells"][0]["gates"]
        if g["gate"] == "drift"
    )
    assert g["verdict"] == "fail" and "relative drift 0.001 > 0.0001 (fp32)" in g["message"]


@pytest.mark.slow
def test_planted_nondeterminism_fails_the_gate(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(REPO)
    base, cand = tmp_path / "base", tmp_path / "cand"
    for out, ref in ((base, "determinism"), (cand, "tests.plugins.det_planted:Nondeterministic")):
        matrix = tmp_path / f"{out.name}.yaml"
        matrix.write_text(
            f"version: 1\nbackends: [cpu]\nworkloads:\n  - workload: '{ref}'\n"
            "    grid: {target: [mlp]}\n"
        )
        code, _, err = cli("run", "--matrix", str(matrix), "--out", str(out))
        assert code == 0, err
    # The two runs used different matrix files: compare cell records directly.
    import json

    run = json.loads((cand / "run.json").read_text())
    run["matrix"] = json.loads((base / "run.json").read_text())["matrix"]
    (cand / "run.json").write_text(json.dumps(run))
    decision = decide(
        LoadedRun.load(base), LoadedRun.load(cand), load_policy(None, "nightly-training")
    )
    g = next(g for g in decision["cells"][0]["gates"] if g["gate"] == "determinism")
    assert g["verdict"] == "fail"
    assert "not deterministic across processes: first differing tensor 'output'" in g["message"]
    # cpu is outside nightly-training's fleet (cuda): a hard failure there defers
    assert decision["decision"] == "defer"


@pytest.mark.parametrize(
    ("base_ok", "cand_ok", "verdict"),
    [(True, True, "pass"), (True, False, "fail"), (False, False, "pass"), (False, True, "fixed")],
)
def test_with_default_algorithms_only_new_nondeterminism_fails(
    tmp_path: Path, base_ok: bool, cand_ok: bool, verdict: str
) -> None:
    def cell(ok: bool) -> Cell:
        metrics = _m(
            deterministic_in_process=True, deterministic_cross_process=ok,
            first_difference="" if ok else "grad_table", max_difference=0.0 if ok else 2e-7,
            deterministic_algorithms=False,
        )  # fmt: skip
        return Cell(workload="determinism", metrics=metrics)

    g = _gate(tmp_path, [cell(base_ok)], [cell(cand_ok)], "determinism", "nightly-training")
    assert g["verdict"] == verdict, g["message"]
    if not cand_ok:
        assert "with torch's default algorithms" in g["message"] and "grad_table" in g["message"]
