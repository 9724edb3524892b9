"""The worst rank is a distributed cell's figure: per-sample maxima of lockstep samples, the
largest peak; and the figures a workload records once per round (save, load, recovery,
exposed communication) judged by the sequential test, by seeded simulation."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from suite.core.stats import summarize
from suite.judge.gates import timing_gate
from suite.judge.policy import Gate
from suite.judge.sequential import Design
from suite.worker.worst_rank import fold_worst
from tests.helpers import TESTS, cli

PLANTED = TESTS / "plugins" / "dist_planted.py"


def _doc(samples: list[float], peak: int) -> dict[str, Any]:
    return {
        "timing": {"samples_s": samples, "summary": summarize(samples), "calls_per_sample": 1},
        "noise": {"relative_iqr": 0.0, "grade": "ok", "samples": len(samples)},
        "throughput": {"unit": "samples/s", "items_per_iter": 64.0, "value": 0.0},
        "memory": {"method": "cpu-allocator", "peak_bytes": peak},
    }


def _part(rank: int, samples: list[float], peak: int, cps: int = 1) -> dict[str, Any]:
    return {"rank": rank, "status": "ok", "samples_s": samples, "calls_per_sample": cps,
            "peak_bytes": peak}  # fmt: skip


def test_the_slowest_rank_at_each_step_and_the_largest_peak_are_the_cells() -> None:
    rank0 = [1.0, 1.0, 1.0, 1.0]
    rank1 = [0.5, 3.0, 0.5, 3.0]  # slower at steps 1 and 3 only
    doc = _doc(rank0, 100)
    fold_worst(doc, [_part(0, rank0, 100), _part(1, rank1, 300)])
    assert doc["timing"]["samples_s"] == [1.0, 3.0, 1.0, 3.0]
    assert doc["timing"]["summary"]["p50"] == summarize([1.0, 3.0, 1.0, 3.0])["p50"]
    assert doc["timing"]["over_ranks"]["rank0_p50_s"] == 1.0
    assert doc["throughput"]["value"] == pytest.approx(64.0 / doc["timing"]["summary"]["p50"])
    assert doc["memory"]["peak_bytes"] == 300
    assert doc["memory"]["over_ranks"] == {
        "ranks": 2, "worst_rank": 1, "rank0_peak_bytes": 100, "rank_peak_bytes": [100, 300],
    }  # fmt: skip


def test_samples_that_do_not_line_up_give_the_slowest_ranks_own() -> None:
    rank0, rank1 = [1.0, 1.0, 1.0], [2.0, 2.5, 2.0]
    doc = _doc(rank0, 10)
    fold_worst(doc, [_part(0, rank0, 10), _part(1, rank1, 10, cps=3)])
    assert doc["timing"]["samples_s"] == rank1
    assert doc["timing"]["over_ranks"]["slowest_rank"] == 1
    assert "slowest rank" in doc["timing"]["over_ranks"]["fold"]


def test_a_failed_rank_leaves_rank_0s_figures() -> None:
    doc = _doc([1.0, 1.0], 10)
    fold_worst(doc, [_part(0, [1.0, 1.0], 10), {"rank": 1, "status": "failed"}])
    assert doc["timing"]["samples_s"] == [1.0, 1.0] and doc["memory"]["peak_bytes"] == 10
    assert "over_ranks" not in doc["timing"]


def _rounds(values: list[float], metric: str) -> list[dict[str, Any]]:
    return [
        {"round": i, "status": "ok", "timing": None, "metrics": {metric: {"value": v}}}
        for i, v in enumerate(values)
    ]


@pytest.mark.parametrize(
    ("gate_name", "metric"),
    [("checkpoint_save", "save_s"), ("checkpoint_load", "load_s"), ("recovery", "recovery_s"),
     ("comm_exposed", "comm_exposed_s_per_step")],
)  # fmt: skip
def test_a_round_metric_gate_fails_a_doubling_and_rarely_fails_no_change(
    gate_name: str, metric: str
) -> None:
    """300 seeded A/As at 10% noise per round fail at most 1% of the time (the per-look level
    bounds it near 0.5%); a doubled figure fails in nearly every trial."""
    gate = Gate(gate_name, "soft", threshold=0.25)
    design = Design(looks=(6, 10, 14, 20))
    rng = random.Random(40)

    def verdict(scale: float) -> str:
        base = [rng.lognormvariate(0, 0.1) for _ in range(20)]
        cand = [scale * rng.lognormvariate(0, 0.1) for _ in range(20)]
        out = timing_gate(gate, _rounds(base, metric), _rounds(cand, metric), design)
        assert out is not None
        return str(out["verdict"])

    same = [verdict(1.0) for _ in range(300)]
    doubled = [verdict(2.0) for _ in range(300)]
    assert same.count("fail") <= 3
    assert same.count("pass") >= 270
    assert doubled.count("fail") >= 297


def test_a_round_metric_gate_does_not_apply_where_no_record_has_its_figure() -> None:
    gate = Gate("checkpoint_save", "soft", threshold=0.25)
    records = _rounds([1.0, 1.0], "other_s")
    assert timing_gate(gate, records, records, Design()) is None


@pytest.mark.slow
def test_a_heavy_slow_rank_1_fails_peak_memory_where_rank_0_alone_would_pass(
    tmp_path: Path,
) -> None:
    """Two runs of the planted cells (the memory gate wants repeating readings): rank 1 of
    `lopsided: true` holds 3x the memory and sleeps 50 ms a step. Judged as the candidate
    against `lopsided: false`, peak_memory fails on the folded figure and passes on rank 0's."""
    from suite.core.results import read_result
    from suite.judge.gates import memory_gate

    matrix = tmp_path / "m.yaml"
    matrix.write_text(
        f"version: 1\nbackends: [cpu]\nworkloads:\n  - workload: '{PLANTED}:Lopsided'\n"
    )
    records: dict[str, list[dict[str, Any]]] = {"false": [], "true": []}
    for i in range(2):
        out = tmp_path / f"run{i}"
        code, _, err = cli("run", "--matrix", str(matrix), "--out", str(out))
        assert code == 0, err
        for case in records:
            records[case].append(
                dict(read_result(out / "cells" / f"lopsided.{case}.n1x2@cpu.json"))
            )
    gate = Gate("peak_memory", "soft", threshold=0.2, min_bytes=16384)
    folded = memory_gate(gate, records["false"], records["true"], True)
    assert folded["verdict"] == "fail", folded["message"]
    rank0 = [
        {
            **r,
            "memory": {**r["memory"], "peak_bytes": r["memory"]["over_ranks"]["rank0_peak_bytes"]},
        }
        for r in records["true"]
    ]
    assert memory_gate(gate, records["false"], rank0, True)["verdict"] == "pass"
    for doc in records["true"]:
        assert doc["memory"]["over_ranks"]["worst_rank"] == 1
        over = doc["timing"]["over_ranks"]
        assert over["rank_p50_s"][1] >= 0.05  # rank 1 sleeps 50 ms in every step
        assert doc["timing"]["summary"]["p50"] >= 0.05  # and the cell's figure shows it
