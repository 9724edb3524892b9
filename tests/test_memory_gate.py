"""The peak_memory gate (suite/judge/memory.py): a figure that repeats is judged by rule, one that
spreads by a rank rule whose false-fail rate is 1 / C(m + n, m), checked by seeded simulation
and against scipy's exact Mann-Whitney test; too few or too spread readings are inconclusive,
never fail."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from suite.judge.memory import LEVEL, REPEAT_SPREAD, memory_gate, separation_level
from suite.judge.policy import Gate

GATE = Gate("peak_memory", "soft", threshold=0.20, min_bytes=1 << 20)
MIB = 1 << 20


def verdict(bp: list[int], cp: list[int], gate: Gate = GATE) -> str:
    return str(memory_gate(gate, bp, cp, True)["verdict"])


@pytest.mark.parametrize(
    ("change", "expected"), [(1.25, "fail"), (1.05, "pass"), (0.75, "improved"), (1.19, "pass")]
)
def test_a_figure_that_repeats_is_judged_by_rule(change: float, expected: str) -> None:
    base = [100 * MIB] * 3
    cand = [int(100 * MIB * change)] * 2
    assert verdict(base, cand) == expected
    # A reading 0.5% apart still repeats: the allocator's figure on a thread-dependent step.
    assert verdict([*base, int(100.5 * MIB)], cand) == expected


def test_one_reading_a_side_is_never_a_fail() -> None:
    """One round per side: a change of +30% cannot be told from a spread that was never seen."""
    record = memory_gate(GATE, [int(21.6 * MIB)], [int(28.1 * MIB)], True)
    assert record["verdict"] == "inconclusive", record
    assert "do not repeat" in str(record["message"])


def test_the_issues_rss_readings_are_inconclusive() -> None:
    """One side's own rounds spread 60% (RSS): the medians' +23% is no verdict either way."""
    base = [int(x * MIB) for x in (112.6, 79.9, 128.4, 128.3, 96.5, 80.0)]
    cand = [int(x * MIB) for x in (144.6, 160.3, 128.3, 128.3, 112.3, 128.3)]
    record = memory_gate(GATE, base, cand, True)
    assert record["verdict"] == "inconclusive", record
    assert "straddle" in str(record["message"])


def test_growth_within_min_bytes_passes_and_missing_readings_are_untested() -> None:
    assert verdict([1000], [900_000]) == "pass"
    small = Gate("peak_memory", "soft", threshold=0.20, min_bytes=16 << 10)
    assert str(memory_gate(small, [MIB], [MIB + 1000], True)["message"]).endswith("within 16 KiB")
    assert verdict([], [MIB]) == "untested"
    assert memory_gate(GATE, [MIB], [MIB], False)["verdict"] == "not-comparable"


def test_the_separation_level_is_scipys_exact_mann_whitney_p_value() -> None:
    """All of one side above all of the other is U = m*n; its exact one-sided p-value is
    1 / C(m + n, m)."""
    for m, n in ((3, 3), (5, 5), (6, 6), (4, 7)):
        a = np.arange(n) + 100.0
        b = np.arange(m) * 1.0
        p = stats.mannwhitneyu(a, b, alternative="greater", method="exact").pvalue
        assert separation_level(m, n) == pytest.approx(p, rel=1e-12)
        assert separation_level(m, n) == pytest.approx(1 / math.comb(m + n, m))


def _readings(rng: np.random.Generator, n: int, level: float, sigma: float) -> list[int]:
    return [int(x) for x in level * np.exp(rng.normal(0.0, sigma, n))]


def test_false_fails_at_the_threshold_hold_the_stated_rate() -> None:
    """Seeded: readings that spread (lognormal, 10%) with the candidate exactly +20% (the
    threshold) fail at the exchangeable rate, 1/924 for 6 readings a side, and at most LEVEL;
    with no change they never fail."""
    rng = np.random.default_rng(37)
    trials = 20_000
    fails = sum(
        verdict(_readings(rng, 6, 100 * MIB, 0.10), _readings(rng, 6, 120 * MIB, 0.10)) == "fail"
        for _ in range(trials)
    )
    rate = fails / trials
    expected = separation_level(6, 6)
    # The binomial 99.9% interval around 1/924 over 20,000 trials.
    low, high = stats.binom.interval(0.999, trials, expected)
    assert low / trials <= rate <= high / trials, (rate, expected)
    assert rate <= LEVEL
    same = sum(
        verdict(_readings(rng, 6, 100 * MIB, 0.10), _readings(rng, 6, 100 * MIB, 0.10)) == "fail"
        for _ in range(2_000)
    )
    assert same == 0


def test_a_real_growth_fails_and_a_repeating_figure_needs_no_rank_rule() -> None:
    """Seeded: +40% with 3% spread and 6 readings a side fails nearly always; a figure within
    REPEAT_SPREAD is decided by its medians even with two readings a side."""
    rng = np.random.default_rng(7)
    fails = sum(
        verdict(_readings(rng, 6, 100 * MIB, 0.03), _readings(rng, 6, 140 * MIB, 0.03)) == "fail"
        for _ in range(500)
    )
    assert fails >= 495, fails
    tight = int(100 * MIB * (1 + REPEAT_SPREAD / 2))
    assert verdict([100 * MIB, tight], [125 * MIB, 125 * MIB]) == "fail"
