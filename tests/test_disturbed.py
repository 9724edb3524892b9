"""Rounds another process disturbed: the worker measures what else ran on its CPUs during the
timed region, the A/B runs such a round again on both sides, and the timing gates leave out
what stayed disturbed and say so."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from suite.core.results import disturbed
from suite.judge.gates import paired_rounds, timing_gate
from suite.judge.policy import Gate
from suite.judge.sequential import Design
from suite.worker.measure import DISTURBED_CPUS, Budget, CpuReading, disturbance, run_timed
from tests.helpers import TESTS, adopts_where_decided, cli

PLUGIN = f"{TESTS / 'plugins' / 'planted_busy.py'}:PlantedBusy"
POLICY = """\
version: 1
kind: torch-matrix/policy
default_profile: timed
rules:
  - {severity: soft, verdicts: [fail, new-failure], decision: defer,
     reason: "a performance gate regressed beyond its threshold"}
profiles:
  timed:
    fleet_backends: [cpu]
    gates:
      status:      {severity: hard, required: true}
      latency_p50: {severity: soft, threshold: 0.15}
"""


def test_other_processes_beyond_the_spare_cpus_disturb_a_round() -> None:
    before = CpuReading(busy_s=100.0, own_s=10.0, cpus=2)
    # 1 s timed: the worker's two threads used 1.9 CPUs, another process 0.6 more.
    after = CpuReading(busy_s=102.5, own_s=11.9, cpus=2)
    seen = disturbance(before, after, 1.0, threads=2)
    assert seen["other_cpus"] == pytest.approx(0.6) and seen["own_cpus"] == pytest.approx(1.9)
    assert seen["spare_cpus"] == 0 and seen["disturbed"] is True
    # The same load on a machine with a spare CPU for it is no disturbance.
    roomy = disturbance(before, CpuReading(102.5, 11.9, 3), 1.0, threads=2)
    assert roomy["disturbed"] is False
    quiet = disturbance(before, CpuReading(101.9 + DISTURBED_CPUS / 2, 11.9, 2), 1.0, threads=2)
    assert quiet["disturbed"] is False
    unmeasured = disturbance(None, after, 1.0, threads=2)
    assert unmeasured["disturbed"] is None and not disturbed(
        {"timing": {"disturbance": unmeasured}}
    )


def test_the_timed_region_reads_the_cpus_before_and_after_it() -> None:
    ticks = iter(range(0, 10**12, 1_000_000))  # 1 ms a reading
    readings = iter([CpuReading(0.0, 0.0, 1), CpuReading(5.0, 0.2, 1)])
    budget = Budget(warmup_iters=1, min_iters=3, max_iters=3, min_time_s=0.0, max_time_s=1.0)
    timing = run_timed(
        lambda: None, lambda: None, budget, clock=lambda: next(ticks), cpu=lambda: next(readings)
    )
    assert timing.disturbance is not None and timing.disturbance["disturbed"] is True
    assert timing.as_dict()["disturbance"] == timing.disturbance


def _record(round_no: int, p50: float, *, busy: bool = False, repeats: int = 0) -> dict[str, Any]:
    return {
        "status": "ok",
        "round": round_no,
        "timing": {
            "summary": {"p50": p50, "p95": p50 * 1.1},
            "samples_s": [p50] * 40,
            "disturbance": {"disturbed": busy, "other_cpus": 1.0 if busy else 0.0},
        },
        "noise": {"relative_iqr": 0.01},
        "disturbed_repeats": repeats,
    }


def test_a_round_still_disturbed_is_left_out_of_the_timing_gates() -> None:
    base = [_record(i, 0.010, repeats=1 if i == 2 else 0) for i in range(8)]
    cand = [_record(i, 0.010 * (16 if i == 3 else 1), busy=i == 3) for i in range(8)]
    _, _, d = paired_rounds("latency_p50", base, cand)
    assert len(d) == 7 and max(d) < 0.01  # round 3's 16x never reaches the statistic
    gate = Gate(name="latency_p50", severity="soft", threshold=0.15)
    result = timing_gate(gate, base, cand, Design(looks=(8,)))
    assert result is not None and result["verdict"] != "fail"
    assert "1 round rerun as disturbed" in result["message"]
    assert "1 left out still disturbed" in result["message"]


@pytest.mark.slow
@pytest.mark.alone  # the disturbance is the planted one alone
def test_an_a_a_with_a_busy_process_in_rounds_2_to_6_reruns_them_and_fails_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    markers = tmp_path / "markers"
    markers.mkdir()
    for round_no in range(2, 7):
        (markers / f"r{round_no}").touch()
    monkeypatch.setenv("TORCH_MATRIX_TEST_BUSY_ROUNDS", str(markers))
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY)
    out = tmp_path / "ab"
    code, stdout, _ = cli(
        "ab", "--candidate", "current", "--workload", PLUGIN, "--backend", "cpu",
        "--rounds", "8", "--no-traces", "--policy", str(policy), "--out", str(out),
        "--format", "json",
    )  # fmt: skip
    decision = json.loads(stdout)
    adopts_where_decided(code, decision)  # eight quiet rounds may leave latency inconclusive
    assert list(markers.iterdir()) == []  # every planted round ran
    entries = [
        e
        for side in ("baseline", "candidate")
        for e in json.loads((out / side / "run.json").read_text())["cells"]
    ]
    rerun = {e["round"] for e in entries if e.get("disturbed")}
    assert set(range(2, 7)) <= rerun
    for round_no in range(2, 7):
        # The side that runs first in the round took its marker: its set-aside record shows it.
        first = "baseline" if round_no % 2 == 0 else "candidate"
        (aside,) = (out / first / "disturbed").glob(f"*~r{round_no}.a0.json")
        assert disturbed(json.loads(aside.read_text()))
    gates = [g for c in decision["cells"] for g in c["gates"] if g["gate"] == "latency_p50"]
    assert gates and all(g["verdict"] != "fail" for g in gates)
    assert "rerun as disturbed" in gates[0]["message"]
