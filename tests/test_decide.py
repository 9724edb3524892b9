"""Verdicts and decisions from synthetic result files: every verdict, every default rule,
the policy hash check and not-comparable environments."""

from __future__ import annotations

import copy
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from suite.core.errors import InputError
from suite.core.loaded import LoadedRun
from suite.flows.compare import decide
from suite.judge.policy import load_policy
from suite.judge.rules import TIMING_GATES, apply_rules, exit_code, overall
from suite.judge.sequential import STEADY_STATE_GATES
from suite.report import render_markdown, render_table
from suite.report.escape import md
from tests.helpers import cli
from tests.synthetic import ENV, Cell, make_run, research_decision

TO = "\u2013"  # the en dash between the ends of a range


def _decide(
    tmp_path: Path,
    base: list[Cell],
    cand: list[Cell],
    *,
    profile: str = "research",
    cand_env: dict[str, Any] | None = None,
    policy_file: Path | None = None,
    cand_policy_sha: str | None = None,
    rounds: int = 3,
) -> dict[str, Any]:
    b = make_run(tmp_path / "b", base, run_id="20261130T100000Z-aaaaaa", rounds=rounds, seed=1)
    c = make_run(
        tmp_path / "c",
        cand,
        run_id="20261130T100000Z-bbbbbb",
        rounds=rounds,
        seed=2,
        env=cand_env,
        policy_sha=cand_policy_sha,
    )
    return decide(LoadedRun.load(b), LoadedRun.load(c), load_policy(policy_file, profile))


def _gate(decision: dict[str, Any], cell_id: str, gate: str) -> dict[str, Any]:
    cell = next(c for c in decision["cells"] if c["cell_id"] == cell_id)
    return next(g for g in cell["gates"] if g["gate"] == gate)


def test_identical_sides_adopt(tmp_path: Path) -> None:
    d = _decide(tmp_path, [Cell()], [Cell()])
    assert d["decision"] == "adopt"
    assert {g["gate"]: g["verdict"] for g in d["cells"][0]["gates"]} == {
        "status": "pass",
        "correctness": "pass",
        "latency_p50": "pass",
        "latency_p95": "pass",
        "throughput": "pass",
        "peak_memory": "pass",
        # Plain runs carry no counts: the gate says so, and the info gate blocks nothing.
        "instructions": "untested",
    }
    assert exit_code(d["decision"]) == 0


def test_latency_regression_fails_and_defers(tmp_path: Path) -> None:
    d = _decide(tmp_path, [Cell()], [Cell(level_s=0.013)])
    gate = _gate(d, "w.a@cpu", "latency_p50")
    assert gate["verdict"] == "fail"
    assert gate["change"] == pytest.approx(0.3, abs=0.02)
    assert gate["ci"][0] > 0.15 and gate["rounds"] == 3
    assert _gate(d, "w.a@cpu", "throughput")["verdict"] == "fail"
    assert d["decision"] == "defer"
    assert any("performance gate regressed" in r for r in d["reasons"])
    assert exit_code("defer") == 5


def test_latency_improvement(tmp_path: Path) -> None:
    d = _decide(tmp_path, [Cell()], [Cell(level_s=0.007)])
    assert _gate(d, "w.a@cpu", "latency_p50")["verdict"] == "improved"
    assert d["decision"] == "adopt"


def test_noisy_cell_is_inconclusive_not_pass_or_fail(tmp_path: Path) -> None:
    d = _decide(tmp_path, [Cell(spread=0.5)], [Cell(level_s=0.013, spread=0.5)])
    gate = _gate(d, "w.a@cpu", "latency_p50")
    assert gate["verdict"] == "inconclusive"
    assert gate["undecided"] == "noise" and gate["spread"] > 0.01
    assert "not resolved by the last look (3 rounds)" in gate["message"]


def test_required_inconclusive_on_fleet_defers(tmp_path: Path) -> None:
    # inference-service requires latency evidence on cpu, a fleet backend there.
    d = _decide(tmp_path, [Cell(spread=0.5)], [Cell(spread=0.5)], profile="inference-service")
    assert _gate(d, "w.a@cpu", "latency_p50")["verdict"] == "inconclusive"
    assert d["decision"] == "defer"
    assert any("required evidence" in r for r in d["reasons"])


def test_too_few_samples_are_inconclusive(tmp_path: Path) -> None:
    d = _decide(tmp_path, [Cell(samples=1)], [Cell(samples=1, level_s=0.02)], rounds=1)
    gate = _gate(d, "w.a@cpu", "latency_p50")
    # A doubling, but from one round: a single round never decides.
    assert gate["verdict"] == "inconclusive" and gate["undecided"] == "rounds"
    assert "2 processes below 20 samples" in gate["message"]


def test_new_failure_on_fleet_backend_rolls_back(tmp_path: Path) -> None:
    crash = Cell(status="crashed", failure_mode="signal", message="worker killed by SIGSEGV")
    d = _decide(tmp_path, [Cell()], [crash])
    assert _gate(d, "w.a@cpu", "status")["verdict"] == "new-failure"
    assert "SIGSEGV" in _gate(d, "w.a@cpu", "status")["message"]
    assert d["decision"] == "rollback"
    assert d["rows"][0]["reasons"][0].startswith("w.a@cpu: status new-failure")
    assert exit_code("rollback") == 6
    assert d["cells"][0]["repro"]["command"].startswith("torch-matrix run")
    assert "--cell w.a@cpu" in d["cells"][0]["repro"]["command"]


def test_hard_failure_off_fleet_defers(tmp_path: Path) -> None:
    crash = Cell(status="crashed", failure_mode="signal", message="boom")
    d = _decide(tmp_path, [Cell()], [crash], profile="nightly-training")  # fleet: cuda only
    assert d["decision"] == "defer"
    assert any("outside the fleet" in r for r in d["reasons"])


def test_correctness_failure_rolls_back(tmp_path: Path) -> None:
    wrong = Cell(status="failed", failure_mode="correctness", message="accuracy", rmse=1e-3)
    d = _decide(tmp_path, [Cell()], [wrong])
    gate = _gate(d, "w.a@cpu", "correctness")
    assert gate["verdict"] == "fail"
    assert "RMSE vs fp64 0.001 > 2 x 1e-07" in gate["message"]
    assert _gate(d, "w.a@cpu", "status")["verdict"] == "pass"  # it ran; correctness judges it
    assert d["decision"] == "rollback"


def test_correctness_uses_policy_tolerances(tmp_path: Path) -> None:
    policy = tmp_path / "p.yaml"
    text = (Path(__file__).parent.parent / "suite" / "data" / "default-policy.yaml").read_text()
    policy.write_text(text.replace("fp32: [2.0, 1.0e-5]", "fp32: [2.0, 1.0e-2]"))
    d = _decide(tmp_path, [Cell()], [Cell(rmse=1e-3)], policy_file=policy)
    assert _gate(d, "w.a@cpu", "correctness")["verdict"] == "pass"


def test_fixed_and_both_failing(tmp_path: Path) -> None:
    crash = Cell(status="crashed", failure_mode="signal", message="boom")
    d = _decide(
        tmp_path,
        [crash, Cell(case="b", status="timeout", failure_mode="timeout")],
        [Cell(), Cell(case="b", status="timeout", failure_mode="timeout")],
    )
    assert _gate(d, "w.a@cpu", "status")["verdict"] == "fixed"
    both = _gate(d, "w.b@cpu", "status")
    assert both["verdict"] == "untested" and "fails on both pins" in both["message"]


def test_unsupported_on_both_and_untested(tmp_path: Path) -> None:
    unsup = Cell(status="unsupported", failure_mode="unsupported", message="no backward on CPU")
    skipped = Cell(case="s", backend="cuda", status="skipped", failure_mode="unavailable")
    d = _decide(tmp_path, [unsup, skipped, Cell(case="only_base")], [unsup, skipped])
    assert _gate(d, "w.a@cpu", "status")["verdict"] == "unsupported"
    assert _gate(d, "w.a@cpu", "correctness")["verdict"] == "unsupported"
    assert _gate(d, "w.s@cuda", "status")["verdict"] == "untested"
    missing = _gate(d, "w.only_base@cpu", "status")
    assert missing["verdict"] == "untested" and "candidate" in missing["message"]
    # research profile: cpu is the fleet, status is required -> the missing cell defers
    assert d["decision"] == "defer"


def test_memory_growth_and_budget(tmp_path: Path) -> None:
    policy = tmp_path / "p.yaml"
    text = (Path(__file__).parent.parent / "suite" / "data" / "default-policy.yaml").read_text()
    policy.write_text(
        text.replace(
            "memory_budget: {severity: budget, budget_bytes: null}",
            "memory_budget: {severity: budget, budget_bytes: 150000000}",
            1,
        )
    )
    d = _decide(
        tmp_path,
        [Cell(), Cell(case="b")],
        [Cell(peak_bytes=160 * 2**20), Cell(case="b", peak_bytes=50 * 2**20)],
        policy_file=policy,
    )
    assert _gate(d, "w.a@cpu", "peak_memory")["verdict"] == "fail"
    assert _gate(d, "w.a@cpu", "memory_budget")["verdict"] == "fail"
    assert _gate(d, "w.b@cpu", "peak_memory")["verdict"] == "improved"
    assert _gate(d, "w.b@cpu", "memory_budget")["verdict"] == "pass"
    assert any("budget is exceeded" in r for r in d["rows"][0]["reasons"])


def test_not_comparable_names_the_difference(tmp_path: Path) -> None:
    env = copy.deepcopy(ENV)
    env["cpu"]["model"] = "Other CPU"
    d = _decide(tmp_path, [Cell()], [Cell()], cand_env=env)
    assert d["comparable"] == {
        "ok": False,
        "differences": [{"field": "cpu.model", "baseline": "Test CPU", "candidate": "Other CPU"}],
    }
    assert _gate(d, "w.a@cpu", "latency_p50")["verdict"] == "not-comparable"
    assert _gate(d, "w.a@cpu", "status")["verdict"] == "pass"
    assert any("cpu.model" in r for r in d["reasons"])


def test_prototype_lane_never_past_isolate(tmp_path: Path) -> None:
    crash = Cell(lane="prototype", status="crashed", failure_mode="signal", message="boom")
    d = _decide(tmp_path, [Cell(lane="prototype"), Cell(workload="v")], [crash, Cell(workload="v")])
    row = next(r for r in d["rows"] if r["row_id"] == "w@cpu")
    assert row["decision"] == "isolate" and "prototype lane" in row["reasons"][-1]
    assert d["decision"] == "isolate"
    assert exit_code("isolate") == 4


def test_isolatable_rows(tmp_path: Path) -> None:
    crash = Cell(workload="flex_attention", backend="cuda", status="crashed", failure_mode="signal")
    ok = Cell(workload="flex_attention", backend="cuda")
    d = _decide(tmp_path, [ok], [crash], profile="distributed-finetune")
    assert d["rows"][0]["isolatable"] is True
    # The profile requires FSDP2, checkpoint and recovery rows: without them nothing is isolated.
    assert d["decision"] == "defer"
    assert d["reasons"][0].startswith("required rows without evidence")
    required = [Cell(workload=w, backend="cuda") for w in ("fsdp2", "checkpoint", "recovery")]
    d = _decide(tmp_path / "2", [ok, *required], [crash, *required], profile="distributed-finetune")
    assert d["decision"] == "isolate"


def test_policy_hash_mismatch_flagged(tmp_path: Path) -> None:
    d = _decide(tmp_path, [Cell()], [Cell()], cand_policy_sha="f" * 64)
    assert d["policy"]["mismatches"] and "ffffffffffff" in d["policy"]["mismatches"][0]
    assert any("captured under policy" in r for r in d["reasons"])
    assert d["policy"]["sha256"] == load_policy(None, "research").sha256


def test_different_matrices_refused(tmp_path: Path) -> None:
    b = make_run(tmp_path / "b", [Cell()], run_id="20261130T100000Z-aaaaaa")
    c = make_run(tmp_path / "c", [Cell()], run_id="20261130T100000Z-bbbbbb", matrix_sha="1" * 64)
    with pytest.raises(InputError) as info:
        decide(LoadedRun.load(b), LoadedRun.load(c), load_policy(None, None))
    assert info.value.path == "$.matrix.sha256" and info.value.file == str(c / "run.json")
    code, _, err = cli("compare", str(b), str(c))
    assert code == 2 and "$.matrix.sha256" in err and "Traceback" not in err


@pytest.mark.parametrize(
    ("policy_text", "path"),
    [
        ("version: 1\nprofiles: {}\n", "$.profiles"),
        (
            "version: 1\nprofiles:\n  p: {fleet_backends: [tpu], gates: {}}\n",
            "$.profiles.p.fleet_backends[0]",
        ),
        (
            "version: 1\nrules: []\nprofiles:\n  p: {fleet_backends: [cpu], gates: {status: {severity: fatal}}}\n",
            "$.profiles.p.gates.status.severity",
        ),
    ],
)
def test_malformed_policy(tmp_path: Path, policy_text: str, path: str) -> None:
    b = make_run(tmp_path / "b", [Cell()], run_id="20261130T100000Z-aaaaaa")
    policy = tmp_path / "policy.yaml"
    policy.write_text(policy_text)
    code, _, err = cli("compare", str(b), str(b), "--policy", str(policy), "--profile", "p")
    assert code == 2
    assert err.startswith(f"torch-matrix: error: {policy}::{path}:")
    assert err.count("\n") == 1


def test_unknown_profile_and_missing_side(tmp_path: Path) -> None:
    b = make_run(tmp_path / "b", [Cell()], run_id="20261130T100000Z-aaaaaa")
    code, _, err = cli("compare", str(b), str(b), "--profile", "nope")
    assert code == 2 and "$.profiles.nope" in err
    code, _, err = cli("compare", str(b), str(tmp_path / "missing"))
    assert code == 2 and f"{tmp_path / 'missing' / 'run.json'}" in err


def test_failed_rollback_gate_defers(tmp_path: Path) -> None:
    from suite.judge.rollback import rollback_cell as _cell

    b = make_run(tmp_path / "b", [Cell()], run_id="20261130T100000Z-aaaaaa")
    c = make_run(tmp_path / "c", [Cell()], run_id="20261130T100000Z-bbbbbb")
    bad = _cell(
        "checkpoint.torch_save.candidate-to-baseline", "fail", "Missing key(s) in state_dict"
    )
    d = decide(
        LoadedRun.load(b),
        LoadedRun.load(c),
        load_policy(None, "research"),
        extra_cells=[bad],
        rollback={
            "duration_s": 12.0,
            "environment_ready_s": 1.0,
            "rehearsal_s": 11.0,
            "checkpoints": {},
        },
    )
    assert d["decision"] == "defer"
    row = next(r for r in d["rows"] if r["row_id"] == "rollback@any")
    assert "adoption would be one-way" in row["reasons"][0]
    assert d["rollback"]["duration_s"] == 12.0


def test_optional_dependency_skipped_on_both_is_not_missing_evidence(tmp_path: Path) -> None:
    skipped = Cell(
        workload="export",
        case="onnx",
        status="skipped",
        failure_mode="dependency",
        message="onnx export needs the optional extra",
    )
    b = make_run(tmp_path / "b", [skipped, Cell()], run_id="20261130T100000Z-aaaaaa")
    c = make_run(tmp_path / "c", [skipped, Cell()], run_id="20261130T100000Z-bbbbbb")
    for run_dir in (b, c):  # the export gate reads the path parameter
        for f in (run_dir / "cells").glob("export*.json"):
            f.write_text(f.read_text().replace('"case": "onnx"', '"path": "onnx"'))
    research = decide(LoadedRun.load(b), LoadedRun.load(c), load_policy(None, "research"))
    assert _gate(research, "export.onnx@cpu", "status")["verdict"] == "unsupported"
    assert research["decision"] == "adopt"
    # a profile that requires the ONNX path defers: it was never shown to work here
    serving = decide(LoadedRun.load(b), LoadedRun.load(c), load_policy(None, "inference-service"))
    assert _gate(serving, "export.onnx@cpu", "export")["verdict"] == "unsupported"
    assert serving["decision"] == "defer"


def _g(name: str, verdict: str, **numbers: Any) -> dict[str, Any]:
    return {"gate": name, "verdict": verdict, "severity": "soft", "message": "m", **numbers}


def _headline(*cells: list[dict[str, Any]], profile: str = "research") -> tuple[str, list[str]]:
    docs = [
        {
            "cell_id": f"w.c{i}@cpu",
            "row_id": "w@cpu",
            "workload": "w",
            "backend": "cpu",
            "lane": "production",
            "baseline_status": "ok",
            "candidate_status": "ok",
            "gates": [_g("status", "pass"), *gates],
        }
        for i, gates in enumerate(cells)
    ]
    return overall(apply_rules(load_policy(None, profile), docs), docs)


def test_inconclusive_timing_is_never_called_a_pass() -> None:
    decision, reasons = _headline(
        [
            _g(
                "latency_p50",
                "inconclusive",
                rounds=20,
                spread=0.09,
                needed_rounds=60,
                undecided="noise",
            ),
            _g("throughput", "inconclusive", rounds=9, spread=0.05, undecided="budget"),
        ],
        [
            _g("latency_p50", "pass", rounds=6, spread=0.02),
            _g("throughput", "inconclusive", rounds=1, undecided="rounds"),
        ],
    )
    # The research profile lets inconclusive soft gates through: adopt, but not "pass".
    assert decision == "adopt"
    assert reasons == [
        "no rule blocks any of 1 row: 1 has gates that did not pass (3 inconclusive): w@cpu",
        "latency_p50 decided in 1 of 2 cells (1 pass) after 6 rounds; 1 inconclusive "
        "(1 too noisy: spread 9.0% after 20 rounds, ≈60 rounds needed)",
        "throughput decided in 0 of 2 cells; 2 inconclusive "
        "(1 out of time: spread 5.0% after 9 rounds; 1 too few rounds after 1 round)",
    ]


def test_headline_counts_match_the_gates() -> None:
    doc = research_decision()
    assert doc["decision"] == "adopt" and len(doc["rows"]) == 17
    first, *timing = doc["reasons"]
    assert first == (
        "no rule blocks any of 17 rows: 2 pass every gate; 3 have gates that did not pass "
        "(1 fail, 14 inconclusive, 2 unsupported, 4 untested): flex_attention@cpu, "
        "linear_cross_entropy@cpu, mlp_train@cpu; 12 measured nothing (every gate untested), "
        "on cuda, rocm, mps"
    )
    assert not any("all" in r and "pass" in r for r in doc["reasons"])
    *timing, skipped = timing
    assert [r.split(" ", 1)[0] for r in timing] == list(STEADY_STATE_GATES)
    # The cells of backends absent here ran nowhere: no count of what was judged includes them.
    absent = [c for c in doc["cells"] if c["baseline_status"] == c["candidate_status"] == "skipped"]
    assert skipped == (
        f"{len(absent)} cells skipped on both sides (cuda, mps, rocm: a backend or dependency "
        "absent here), not counted above"
    )
    ran = [c for c in doc["cells"] if c not in absent]
    for name, line in zip(TIMING_GATES, timing, strict=False):
        gates = [g for c in ran for g in c["gates"] if g["gate"] == name]
        count = Counter(g["verdict"] for g in gates)
        decided = count["pass"] + count["improved"] + count["fail"]
        assert line.startswith(f"{name} decided in {decided} of {len(gates)} cells (")
        assert f"; {count['inconclusive']} inconclusive (" in line
        assert line.endswith(f"; {count['untested']} untested")
        noisy = sum(g.get("undecided") == "noise" for g in gates)
        late = sum(g.get("undecided") == "budget" for g in gates)
        assert (
            f"({noisy} too noisy: spread 8.4{TO}12% after 20 rounds, ≈49{TO}96 rounds needed"
            in line
        )
        assert f"; {late} out of time: spread " in line
    assert timing[0] == (
        f"latency_p50 decided in 7 of 13 cells (6 pass, 1 improved) after 6{TO}10 rounds; "
        f"5 inconclusive (3 too noisy: spread 8.4{TO}12% after 20 rounds, ≈49{TO}96 rounds needed; "
        f"2 out of time: spread 5.2{TO}6.4% after 9{TO}14 rounds, ≈24{TO}31 rounds needed); "
        "1 untested"
    )


def test_every_gate_passing_says_so_with_its_rounds() -> None:
    decision, reasons = _headline(
        [_g("latency_p50", "pass", rounds=8)], [_g("latency_p50", "improved", rounds=12)]
    )
    assert decision == "adopt"
    assert reasons == [
        "the only row passes every gate",
        f"latency_p50 decided in 2 of 2 cells (1 pass, 1 improved) after 8{TO}12 rounds",
    ]


def test_other_decisions_add_the_timing_lines() -> None:
    decision, reasons = _headline(
        [_g("latency_p50", "fail", rounds=10)], [_g("latency_p50", "untested")]
    )
    assert decision == "defer"
    assert reasons[0].startswith("w@cpu → defer: w.c0@cpu: latency_p50 fail")
    assert reasons[1:] == [
        "latency_p50 decided in 1 of 2 cells (1 fail) after 10 rounds; 1 untested"
    ]


def test_old_records_without_rounds_still_count() -> None:
    _, reasons = _headline([_g("latency_p95", "inconclusive")], [_g("latency_p95", "pass")])
    assert reasons[1] == (
        "latency_p95 decided in 1 of 2 cells (1 pass); 1 inconclusive (1 cause not recorded)"
    )


def test_headline_without_cells_still_does_not_claim_a_pass(tmp_path: Path) -> None:
    d = _decide(tmp_path, [Cell(spread=0.5)], [Cell(spread=0.5)])
    # Nothing blocks the row, but its CPU cost (neither counted nor timed) was decided nowhere:
    # missing evidence, no adopt.
    assert d["decision"] == "defer"
    assert d["reasons"][0].startswith("instructions was decided in no cell (1 undecided)")
    (line,) = [r for r in d["reasons"] if r.startswith("no rule blocks any of 1 row")]
    assert line.startswith("no rule blocks any of 1 row: 1 has gates that did not pass")
    assert "inconclusive" in line


def test_a_cell_skipped_on_both_sides_for_a_missing_package_is_named_in_the_comment(
    tmp_path: Path,
) -> None:
    # The row has evidence from its other cell, so it stays in the table; the skipped cell
    # would otherwise show only as one 'unsupported' among the row's verdicts.
    ran = Cell(workload="collectives", case="c10d")
    skipped = Cell(workload="collectives", case="torchcomms", status="skipped",
                   failure_mode="dependency", message="torchcomms is not installed")  # fmt: skip
    d = _decide(tmp_path, [ran, skipped], [ran, skipped])
    assert _gate(d, "collectives.torchcomms@cpu", "status")["verdict"] == "unsupported"
    said = "Skipped on both sides, no evidence either way: collectives.torchcomms@cpu "
    text = render_table(d)
    assert said + "(torchcomms is not installed)." in text
    assert "collectives.c10d@cpu" not in text.split("Skipped on both sides")[1]
    assert md(said) in render_markdown(d)
