"""Compile and export gates for any workload: a plugin records its graph breaks (ctx.explain),
its recompiles (ctx.recompiles) and its export paths (ctx.export_path), and the graph_breaks,
recompiles, export and compile_time gates read them as they read the built-in workloads'. Each
model a workload runs is a row of its own; an A/B of fixed rounds that judged fewer says so."""

from __future__ import annotations

import json
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import Any

import pytest

from suite.core.loaded import LoadedRun
from suite.judge.decision import rounds_shortfall, row_id_of
from suite.judge.exports import plugin_exports
from suite.judge.gates import cold_compile_s
from suite.judge.policy import Gate
from suite.judge.sequential import Design
from suite.workloads.base import REASONS_CAP, joined_reasons
from tests.helpers import TESTS, cli

PLUGIN = f"{TESTS / 'plugins' / 'planted_compile.py'}:PlantedCompile"
EXPORT = Gate(name="export", severity="required", paths=("torch_export", "onnx", "aoti"))


def _exports(**paths: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"exports": paths}]


OK = {"ok": True, "error": None, "max_abs_error": 1e-7}
BROKE = {"ok": False, "error": "UserError: data-dependent branch", "max_abs_error": None}


def test_each_export_path_is_compared_between_the_pins() -> None:
    def verdict(base: list[dict[str, Any]], cand: list[dict[str, Any]]) -> tuple[str, str]:
        out = plugin_exports(EXPORT, base, cand)
        assert out is not None
        return out["verdict"], out["message"]

    assert verdict(_exports(onnx=OK), _exports(onnx=OK)) == (
        "pass",
        "onnx runs (max abs error 1e-07)",
    )
    broke = verdict(_exports(torch_export=OK, onnx=OK), _exports(torch_export=BROKE, onnx=OK))
    assert broke[0] == "new-failure"
    assert broke[1].startswith(
        "torch_export fails on the candidate, ran on the baseline: UserError"
    )
    assert verdict(_exports(onnx=BROKE), _exports(onnx=BROKE))[0] == "fail"
    assert verdict(_exports(onnx=BROKE), _exports(onnx=OK))[0] == "fixed"
    assert verdict(_exports(onnx=OK), [{}])[0] == "untested"
    assert verdict(_exports(onnx=OK, aoti=OK), _exports(onnx=OK))[0] == "untested"  # aoti not tried
    # A path the policy does not judge is left out; with only such paths, no verdict at all.
    assert plugin_exports(EXPORT, _exports(tflite=BROKE), _exports(tflite=BROKE)) is None
    anything = Gate(name="export", severity="required", paths=())
    assert plugin_exports(anything, _exports(tflite=OK), _exports(tflite=BROKE)) is not None
    assert plugin_exports(EXPORT, [{}], [{}]) is None


def test_a_compiled_steps_cold_time_is_what_compile_time_reads() -> None:
    assert cold_compile_s({"metrics": {"compile_cold_s": {"value": 3.5}}}) == 3.5
    assert cold_compile_s({"timing": {"compile_s": 1.25}, "metrics": {}}) == 1.25
    assert cold_compile_s({"timing": {"compile_s": None}}) is None
    assert cold_compile_s({}) is None


def test_reasons_are_distinct_one_line_each_and_capped() -> None:
    assert joined_reasons(["a\n  b", "a b", "", "c"]) == "a b | c"
    assert len(joined_reasons(f"reason {i}" for i in range(1000))) == REASONS_CAP


def test_each_model_of_a_workload_is_a_row() -> None:
    spec = {"workload": "hf", "backend": "cpu", "params": {"model": "gpt2", "mode": "eager"}}
    assert row_id_of(spec) == "hf.gpt2@cpu"
    assert row_id_of({**spec, "params": {"mode": "eager"}}) == "hf@cpu"


def _side(design: Design | None, statuses: dict[str, list[str]]) -> LoadedRun:
    run: Any = {"ab": {"design": design.as_dict()} if design else {}}
    results = {cell: [{"status": s} for s in ss] for cell, ss in statuses.items()}
    return LoadedRun("side", Path("."), run, results)  # type: ignore[arg-type]


def test_fixed_rounds_that_judged_fewer_are_said_first() -> None:
    fixed = Design().fixed(3)
    base = _side(fixed, {"a@cpu": ["ok"] * 3, "b@cpu": ["ok"] * 3, "c@cpu": ["skipped"]})
    cand = _side(fixed, {"a@cpu": ["ok"] * 3, "b@cpu": ["ok", "failed"], "c@cpu": ["skipped"]})
    (line,) = rounds_shortfall(base, cand, fixed)
    assert line.startswith("--rounds 3 asked for 3 paired rounds; 1 of 2 cells that ran judged")
    assert "(as few as 1)" in line
    whole = _side(fixed, {"a@cpu": ["ok"] * 3, "b@cpu": ["ok"] * 3})
    assert rounds_shortfall(whole, whole, fixed) == []
    looks = Design()  # the policy's looks: a cell stops where its gates decided, by design
    assert (
        rounds_shortfall(_side(looks, {"a@cpu": ["ok"]}), _side(looks, {"a@cpu": ["ok"]}), looks)
        == []
    )


def _venv(path: Path, plant: bool) -> str:
    subprocess.run(
        [sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(path)],
        check=True,
    )
    if plant:
        site = Path(sysconfig.get_path("purelib", vars={"base": str(path), "platbase": str(path)}))
        (site / "tm_plant.pth").write_text(
            "import os; os.environ.setdefault('TM_PLANTED_COMPILE', '1')\n"
        )
    return str(path / "bin" / "python")


@pytest.mark.slow
@pytest.mark.xdist_group("ab")
def test_a_plugins_planted_graph_break_and_export_failure_fail_their_gates(tmp_path: Path) -> None:
    out = tmp_path / "ab"
    cli(
        "ab", "--baseline", _venv(tmp_path / "base", False),
        "--candidate", _venv(tmp_path / "cand", True), "--workload", PLUGIN, "--backend", "cpu",
        "--rounds", "1", "--no-count", "--no-traces", "--out", str(out),
    )  # fmt: skip
    decision = json.loads((out / "decision.json").read_text())
    rows = {r["row_id"] for r in decision["rows"]}
    assert {"planted_compile.narrow@cpu", "planted_compile.wide@cpu"} <= rows
    for cell in (c for c in decision["cells"] if c["workload"] == "planted_compile"):
        gates = {g["gate"]: g for g in cell["gates"]}
        assert gates["graph_breaks"]["verdict"] == "fail", gates["graph_breaks"]
        assert (gates["graph_breaks"]["baseline"], gates["graph_breaks"]["candidate"]) == (0, 1)
        assert "graph_break" in gates["graph_breaks"]["message"]  # the new break's reason
        assert gates["export"]["verdict"] == "new-failure", gates["export"]
        assert "torch_export fails on the candidate" in gates["export"]["message"]
        assert "compile_time" in gates  # the compiled step's cold time, paired
        assert gates["status"]["verdict"] == "pass"  # the cell ran on both: only its gates failed
    assert decision["decision"] != "adopt"


def test_an_untested_timing_gate_says_why_each_side_gave_no_round() -> None:
    from suite.judge.gates import timing_gate

    gate = Gate(name="latency_p50", severity="soft", threshold=0.1)
    design = Design().fixed(3)

    def message(base: list[dict[str, Any]], cand: list[dict[str, Any]]) -> str:
        out = timing_gate(gate, base, cand, design)
        assert out is not None and out["verdict"] == "untested"
        return out["message"]

    assert message([], []) == (
        "no paired timing rounds on both sides: no round ran on the baseline side (the time "
        "budget ran out first, or it never reported); no round ran on the candidate side (the "
        "time budget ran out first, or it never reported)"
    )
    crashed = [{"round": 0, "status": "crashed"}]
    assert "the candidate side did not run ok (crashed)" in message([], crashed)
    stirred = {
        "status": "ok",
        "disturbed_repeats": 2,
        "timing": {"disturbance": {"disturbed": True}},
    }
    text = message([{**stirred, "round": 0}], [{**stirred, "round": 0}])
    assert "every round of the baseline side stayed disturbed by another process (1 round, " in text
    assert "rerun 2 times)" in text
