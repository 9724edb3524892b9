from __future__ import annotations

import math
import random
import re
import statistics

import pytest

from suite.paired import (
    RankTest,
    can_reach,
    judge_change,
    mann_whitney,
    noise_floor,
    paired_ratio,
)


def _cell(
    rng: random.Random, center: float, *, rounds: int = 7, per_round: int = 30, noise: float = 0.02
) -> tuple[list[float], list[float]]:
    """Synthetic cell: per-round p50s and all raw samples, log-normal noise around `center`."""
    p50s: list[float] = []
    samples: list[float] = []
    for _ in range(rounds):
        batch = [center * math.exp(rng.gauss(0.0, noise)) for _ in range(per_round)]
        p50s.append(statistics.median(batch))
        samples.extend(batch)
    return p50s, samples


def _pair(
    factor: float, *, noise: float = 0.02, seed: int = 7, **kw: int
) -> tuple[list[float], list[float], list[float], list[float]]:
    rng = random.Random(seed)
    base_rounds, base_samples = _cell(rng, 0.010, noise=noise, **kw)
    cand_rounds, cand_samples = _cell(rng, 0.010 * factor, noise=noise, **kw)
    return base_rounds, cand_rounds, base_samples, cand_samples


# --- mann_whitney -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("n_base", "n_cand", "shift"),
    [
        (1, 1, 0.0),
        (3, 3, 0.0),
        (7, 5, 0.0),
        (9, 12, 0.3),
        (30, 30, 0.0),
        (30, 30, 0.4),
        (30, 4, 0.5),
    ],
)
def test_mann_whitney_exact_matches_scipy(n_base: int, n_cand: int, shift: float) -> None:
    scipy_stats = pytest.importorskip("scipy.stats")
    rng = random.Random(n_base * 100 + n_cand)
    base = [rng.random() for _ in range(n_base)]
    cand = [rng.random() + shift for _ in range(n_cand)]
    got = mann_whitney(base, cand)
    ref = scipy_stats.mannwhitneyu(cand, base, alternative="two-sided", method="exact")
    assert got.exact is True
    assert got.u == float(ref.statistic)
    assert got.p_value == pytest.approx(float(ref.pvalue), rel=1e-6)
    assert (got.n_baseline, got.n_candidate) == (n_base, n_cand)


@pytest.mark.parametrize(
    ("n_base", "n_cand", "decimals"),
    [(40, 35, 1), (10, 12, 1), (31, 5, None), (60, 60, 2), (200, 150, None)],
)
def test_mann_whitney_asymptotic_matches_scipy(
    n_base: int, n_cand: int, decimals: int | None
) -> None:
    scipy_stats = pytest.importorskip("scipy.stats")
    rng = random.Random(n_base + n_cand)
    base = [rng.gauss(1.0, 0.3) for _ in range(n_base)]
    cand = [rng.gauss(1.15, 0.3) for _ in range(n_cand)]
    if decimals is not None:  # rounding forces ties
        base = [round(v, decimals) for v in base]
        cand = [round(v, decimals) for v in cand]
        assert len(set(base + cand)) < n_base + n_cand
    got = mann_whitney(base, cand)
    ref = scipy_stats.mannwhitneyu(cand, base, alternative="two-sided", method="asymptotic")
    assert got.exact is False
    assert got.u == pytest.approx(float(ref.statistic))
    assert got.p_value == pytest.approx(float(ref.pvalue), rel=1e-6)


def test_mann_whitney_all_values_tied_is_not_significant() -> None:
    got = mann_whitney([1.0] * 5, [1.0] * 6)
    assert got.p_value == 1.0
    assert got.u == 15.0
    assert got.exact is False


def test_mann_whitney_rejects_empty_input() -> None:
    with pytest.raises(ValueError):
        mann_whitney([], [1.0])
    with pytest.raises(ValueError):
        mann_whitney([1.0], [])


def test_min_p_value_for_small_samples() -> None:
    separated = mann_whitney([1.0, 2.0, 3.0], [4.0, 5.0, 6.0])
    assert separated.min_p_value == pytest.approx(0.1)  # 2 / C(6, 3)
    assert separated.p_value == pytest.approx(0.1)  # the most extreme outcome reaches it exactly
    assert separated.u == 9.0
    assert can_reach(separated, 0.1)
    assert not can_reach(separated, 0.01)
    assert mann_whitney([1.0], [2.0]).min_p_value == 1.0  # capped
    assert mann_whitney([0.0] * 10, [1.0] * 10).min_p_value == pytest.approx(2 / math.comb(20, 10))


def test_can_reach_compares_against_min_p() -> None:
    test = RankTest(u=0.0, p_value=0.5, n_baseline=4, n_candidate=4, min_p_value=0.02, exact=True)
    assert can_reach(test, 0.05)
    assert can_reach(test, 0.02)
    assert not can_reach(test, 0.01)


# --- paired_ratio -------------------------------------------------------------------------------


def test_paired_ratio_median_and_ci_on_known_data() -> None:
    est = paired_ratio([1.0] * 5, [1.1, 1.2, 1.3, 1.0, 1.4])
    assert est.ratios == pytest.approx((1.1, 1.2, 1.3, 1.0, 1.4))
    assert est.median == pytest.approx(1.2)
    assert est.confidence == 0.95
    assert 1.0 <= est.ci_low < est.median < est.ci_high <= 1.4
    narrow = paired_ratio([1.0] * 5, [1.1, 1.2, 1.3, 1.0, 1.4], confidence=0.5)
    assert est.ci_low <= narrow.ci_low <= narrow.ci_high <= est.ci_high
    assert (narrow.ci_high - narrow.ci_low) < (est.ci_high - est.ci_low)


def test_paired_ratio_pairs_rounds() -> None:
    # Baselines drift 8x across rounds; the candidate tracks them at +10%. Pairing cancels drift.
    est = paired_ratio([1.0, 2.0, 4.0, 8.0], [1.1, 2.2, 4.4, 8.8])
    assert est.median == pytest.approx(1.1)
    assert est.ci_low == pytest.approx(1.1)
    assert est.ci_high == pytest.approx(1.1)


def test_paired_ratio_is_deterministic_per_seed() -> None:
    rng = random.Random(3)
    base = [1.0 + rng.random() * 0.1 for _ in range(9)]
    cand = [1.2 + rng.random() * 0.3 for _ in range(9)]
    first = paired_ratio(base, cand, seed=11)
    assert paired_ratio(base, cand, seed=11) == first
    bounds = {
        (e.ci_low, e.ci_high)
        for e in (paired_ratio(base, cand, seed=s, resamples=200) for s in range(5))
    }
    assert len(bounds) > 1  # the seed really drives the resampling


def test_paired_ratio_single_round() -> None:
    est = paired_ratio([2.0], [3.0])
    assert est.ratios == (1.5,)
    assert (est.median, est.ci_low, est.ci_high) == (1.5, 1.5, 1.5)


def test_paired_ratio_rejects_bad_input() -> None:
    with pytest.raises(ValueError, match="rounds"):
        paired_ratio([1.0, 2.0], [1.0])
    with pytest.raises(ValueError):
        paired_ratio([], [])
    with pytest.raises(ValueError, match="positive"):
        paired_ratio([1.0, 0.0], [1.0, 1.0])
    with pytest.raises(ValueError, match="positive"):
        paired_ratio([-1.0], [1.0])
    with pytest.raises(ValueError):
        paired_ratio([1.0], [1.0], confidence=1.0)


# --- noise_floor --------------------------------------------------------------------------------


def test_noise_floor() -> None:
    assert noise_floor([1.0, 1.1, 0.9]) == pytest.approx(0.1)
    assert noise_floor([10.0, 10.0, 13.0, 9.0]) == pytest.approx(0.3)  # median 10
    assert noise_floor([2.0, 2.0]) == 0.0
    assert noise_floor([5.0]) == 0.0
    assert noise_floor([]) == 0.0


# --- judge_change -------------------------------------------------------------------------------

_MESSAGE = re.compile(
    r"^p50 [+-]\d+\.\d% \(95% CI [+-]\d+\.\d%\.\.[+-]\d+\.\d%\), p=[0-9.e+-]+: .+$"
)


def test_judge_clear_regression_fails() -> None:
    change = judge_change(*_pair(1.20), threshold=0.10, alpha=0.01)
    assert change.verdict == "fail"
    assert change.ratio.median == pytest.approx(1.20, abs=0.02)
    assert change.ratio.ci_low > 1.10
    assert change.test.p_value < 1e-6
    assert _MESSAGE.match(change.message), change.message
    assert change.message.startswith(f"p50 +{(change.ratio.median - 1) * 100:.1f}%")
    assert "±10.0%" in change.message


def test_judge_clear_improvement() -> None:
    change = judge_change(*_pair(0.80), threshold=0.10, alpha=0.01)
    assert change.verdict == "improved"
    assert change.ratio.median == pytest.approx(0.80, abs=0.02)
    assert change.ratio.ci_high < 0.90
    assert change.message.startswith("p50 -")


def test_judge_identical_distributions_pass() -> None:
    change = judge_change(*_pair(1.0), threshold=0.10, alpha=0.01)
    assert change.verdict == "pass"
    assert change.ratio.median == pytest.approx(1.0, abs=0.02)
    assert change.test.p_value > 0.01


def test_judge_small_insignificant_change_passes() -> None:
    # +5% point estimate, CI reaching past the threshold, but no significant shift: pass.
    base_rounds = [1.0] * 5
    cand_rounds = [0.85, 1.0, 1.05, 1.15, 1.30]
    rng = random.Random(5)
    base = [math.exp(rng.gauss(0.0, 0.3)) for _ in range(50)]
    cand = [1.05 * math.exp(rng.gauss(0.0, 0.3)) for _ in range(50)]
    change = judge_change(base_rounds, cand_rounds, base, cand, threshold=0.10, alpha=0.01)
    assert change.ratio.ci_high > 1.10
    assert change.test.p_value > 0.01
    assert change.verdict == "pass"
    assert "no significant change" in change.message


def test_judge_noisy_regression_is_inconclusive() -> None:
    # +12% point estimate against a 10% threshold, but rounds and samples are too noisy to tell.
    base_rounds = [1.0] * 5
    cand_rounds = [0.80, 1.05, 1.12, 1.35, 1.50]
    rng = random.Random(9)
    base = [math.exp(rng.gauss(0.0, 0.5)) for _ in range(40)]
    cand = [1.12 * math.exp(rng.gauss(0.0, 0.5)) for _ in range(40)]
    change = judge_change(base_rounds, cand_rounds, base, cand, threshold=0.10, alpha=0.01)
    assert change.ratio.median == pytest.approx(1.12)
    assert change.ratio.ci_low < 1.0 < change.ratio.ci_high
    assert change.verdict == "inconclusive"
    assert change.message.startswith("p50 +12.0%")
    assert "beyond threshold ±10.0% but p > 0.01" in change.message


def test_judge_threshold_below_noise_floor_is_inconclusive() -> None:
    data = _pair(1.20)
    assert judge_change(*data, threshold=0.10, alpha=0.01, noise_floor=0.05).verdict == "fail"
    change = judge_change(*data, threshold=0.10, alpha=0.01, noise_floor=0.15)
    assert change.verdict == "inconclusive"
    assert "noise floor" in change.message
    assert "±10.0%" in change.message and "±15.0%" in change.message


def test_judge_unreachable_alpha_is_inconclusive() -> None:
    # Perfectly separated but only 3 vs 3 samples: min p is 0.1, so alpha 0.01 can never be met.
    base, cand = [1.0, 1.01, 0.99], [1.5, 1.51, 1.49]
    change = judge_change(base, cand, base, cand, threshold=0.10, alpha=0.01)
    assert change.verdict == "inconclusive"
    assert change.test.min_p_value == pytest.approx(0.1)
    assert "(3, 3)" in change.message and "min p=0.1" in change.message
    assert judge_change(base, cand, base, cand, threshold=0.10, alpha=0.1).verdict == "fail"


def test_judge_throughput_drop_fails_when_lower_is_worse() -> None:
    rng = random.Random(21)
    base_rounds, base = _cell(rng, 1000.0)
    cand_rounds, cand = _cell(rng, 800.0)
    change = judge_change(
        base_rounds, cand_rounds, base, cand, threshold=0.10, alpha=0.01, higher_is_worse=False
    )
    assert change.verdict == "fail"
    assert change.ratio.median == pytest.approx(0.80, abs=0.02)
    assert change.message.startswith("p50 -")
    latency_view = judge_change(base_rounds, cand_rounds, base, cand, threshold=0.10, alpha=0.01)
    assert latency_view.verdict == "improved"


def test_judge_rejects_bad_parameters() -> None:
    data = _pair(1.0)
    with pytest.raises(ValueError):
        judge_change(*data, threshold=-0.1, alpha=0.01)
    with pytest.raises(ValueError):
        judge_change(*data, threshold=0.1, alpha=0.0)
