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
