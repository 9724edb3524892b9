from __future__ import annotations

import pytest

from suite.core import stats


def test_quantile_matches_linear_interpolation() -> None:
    values = [1.0, 2.0, 3.0, 4.0]
    assert stats.quantile(values, 0.5) == 2.5
    assert stats.quantile(values, 0.0) == 1.0
    assert stats.quantile(values, 1.0) == 4.0
    assert stats.quantile(values, 0.95) == pytest.approx(3.85)


def test_summarize_derives_everything_from_raw_samples() -> None:
    s = stats.summarize([0.010, 0.012, 0.011, 0.013, 0.050])
    assert s["n"] == 5
    assert s["p50"] == pytest.approx(0.012)
    assert s["min"] == 0.010 and s["max"] == 0.050
    assert s["iqr"] == pytest.approx(0.013 - 0.011)
    assert s["relative_iqr"] == pytest.approx(0.002 / 0.012)
    assert s["p95"] > s["p50"]


def test_noise_grade_uses_named_threshold() -> None:
    assert stats.noise_grade(stats.NOISY_RELATIVE_IQR) == "ok"
    assert stats.noise_grade(stats.NOISY_RELATIVE_IQR + 1e-9) == "noisy"


def test_empty_samples_refused() -> None:
    with pytest.raises(ValueError):
        stats.summarize([])


def test_throughput_at_median() -> None:
    assert stats.throughput(1000, 0.5) == 2000
    assert stats.throughput(1000, 0.0) == 0.0


def _round(round_no: int, samples: list[float], summary_p50: float) -> dict[str, object]:
    """A record whose summary copy says summary_p50 whatever its samples say."""
    copy = {**stats.summarize(samples), "p50": summary_p50, "p95": summary_p50}
    return {
        "status": "ok",
        "round": round_no,
        "timing": {"samples_s": samples, "summary": copy},
        "throughput": {"unit": "items/s", "items_per_iter": 100.0, "value": 1.0},
    }


def test_a_record_is_judged_by_its_samples_never_by_the_copy_beside_them() -> None:
    """The summary and rate a worker writes are copies for readers; a file whose copy disagrees
    with its samples (edited, or written by another version) is judged by the samples."""
    from suite.judge.gates import paired_rounds, timing_gate
    from suite.judge.policy import Gate
    from suite.judge.sequential import Design

    samples = [0.010 + 0.0001 * (i % 5) for i in range(40)]
    base = [_round(i, samples, summary_p50=0.010) for i in range(8)]
    cand = [_round(i, samples, summary_p50=0.050) for i in range(8)]  # the copy says 5x slower
    record = cand[0]
    assert stats.timing_of(record) == stats.summarize(samples)
    assert stats.throughput_of(record) == pytest.approx(100.0 / stats.summarize(samples)["p50"])
    for gate in ("latency_p50", "latency_p95", "throughput"):
        _, _, d = paired_rounds(gate, base, cand)
        assert d == [0.0] * 8, gate
    verdict = timing_gate(
        Gate(name="latency_p50", severity="soft", threshold=0.05), base, cand, Design(looks=(8,))
    )
    assert verdict is not None and verdict["verdict"] == "pass", verdict


def test_a_record_that_timed_nothing_has_no_statistics() -> None:
    assert stats.timing_of({"status": "failed", "timing": None}) is None
    assert stats.throughput_of({"timing": {"samples_s": [0.1]}}) is None  # counts no items
    assert stats.throughput_of({"throughput": {"items_per_iter": 8.0}}) is None
