"""Paired baseline-vs-candidate statistics: the one place that decides if a timing change is real.

Two independent lines of evidence must agree before a change is called: a Mann-Whitney rank test
on the raw per-iteration samples (is there any shift at all?) and a bootstrap CI of the median
per-round ratio (how big is it, and how sure are we?). Rounds are interleaved, so pairing round i
of each side cancels slow drift of the machine (thermal, background load) that affects both.
Standard library only, so the decision can be made without numpy/scipy in the parent process.
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from suite.stats import quantile

# Above this per-side sample size (or with ties) the exact U distribution is replaced by the
# normal approximation; this matches where exact enumeration stops being cheap and necessary.
EXACT_MAX_N = 30

VERDICTS = ("pass", "fail", "improved", "inconclusive")


@dataclass(frozen=True)
class RankTest:
    u: float  # Mann-Whitney U of the candidate sample
    p_value: float  # two-sided
    n_baseline: int
    n_candidate: int
    min_p_value: float  # smallest two-sided p these sizes can reach (exact, no ties), capped at 1
    exact: bool  # True when computed by the exact distribution


def _u_counts(m: int, n: int) -> list[int]:
    """counts[u] = number of orderings of m vs n items whose U equals u.

    The generating function is the Gaussian binomial [m+n choose m]_q
    = prod_{i=1..m} (1 - q^(n+i)) / (1 - q^i); each factor is an O(mn) pass over exact integers.
    """
    poly = [1] + [0] * (m * n)
    for i in range(1, m + 1):
        a = n + i
        for k in range(len(poly) - 1, a - 1, -1):  # multiply by (1 - q^a), high to low
            poly[k] -= poly[k - a]
        for k in range(i, len(poly)):  # divide by (1 - q^i): r[k] = p[k] + r[k - i]
            poly[k] += poly[k - i]
    return poly


def _average_ranks(values: Sequence[float]) -> tuple[list[float], list[int]]:
    """1-based ranks with ties averaged, plus the size of every tie group."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = [0.0] * len(values)
    groups: list[int] = []
    start = 0
    while start < len(order):
        end = start
        while end + 1 < len(order) and values[order[end + 1]] == values[order[start]]:
            end += 1
        for k in range(start, end + 1):
            ranks[order[k]] = (start + end) / 2 + 1
        groups.append(end - start + 1)
        start = end + 1
    return ranks, groups


def mann_whitney(baseline: Sequence[float], candidate: Sequence[float]) -> RankTest:
    """Two-sided Mann-Whitney U test; matches scipy.stats.mannwhitneyu(candidate, baseline)."""
    n1, n2 = len(candidate), len(baseline)
    if n1 == 0 or n2 == 0:
        raise ValueError("mann_whitney needs at least one baseline and one candidate sample")
    ranks, groups = _average_ranks([*candidate, *baseline])
    u1 = math.fsum(ranks[:n1]) - n1 * (n1 + 1) / 2
    u_max = max(u1, n1 * n2 - u1)  # two-sided: the more extreme tail, doubled
    total = math.comb(n1 + n2, n1)
    min_p = min(1.0, 2 / total)
    ties = any(g > 1 for g in groups)
    if n1 <= EXACT_MAX_N and n2 <= EXACT_MAX_N and not ties:
        counts = _u_counts(n1, n2)
        tail = sum(counts[round(u_max) :])  # integer arithmetic: no cancellation in the tail
        p = min(1.0, 2 * tail / total)
        return RankTest(u1, p, n2, n1, min_p, True)
    n = n1 + n2
    tie_term = sum(g**3 - g for g in groups)
    sd = math.sqrt(n1 * n2 / 12 * ((n + 1) - tie_term / (n * (n - 1))))
    if sd == 0.0:  # every value identical: no evidence of any shift
        return RankTest(u1, 1.0, n2, n1, min_p, False)
    z = (u_max - n1 * n2 / 2 - 0.5) / sd  # 0.5: continuity correction toward the mean
    p = min(1.0, max(0.0, math.erfc(z / math.sqrt(2))))  # 2 * normal survival at z
    return RankTest(u1, p, n2, n1, min_p, False)


def can_reach(test: RankTest, alpha: float) -> bool:
    """Whether any outcome at these sample sizes could be significant at alpha."""
    return test.min_p_value <= alpha


@dataclass(frozen=True)
class RatioEstimate:
    ratios: tuple[float, ...]  # per-round candidate/baseline
    median: float
    ci_low: float
    ci_high: float
    confidence: float


def paired_ratio(
    baseline: Sequence[float],
    candidate: Sequence[float],
    *,
    confidence: float = 0.95,
    resamples: int = 2000,
    seed: int = 0,
) -> RatioEstimate:
    """Median per-round candidate/baseline ratio with a percentile-bootstrap CI over rounds."""
    if len(baseline) != len(candidate):
        raise ValueError(f"{len(baseline)} baseline rounds but {len(candidate)} candidate rounds")
    if not baseline:
        raise ValueError("paired_ratio needs at least one round")
    if any(not b > 0 for b in baseline):
        raise ValueError("baseline round values must be positive")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence {confidence} outside (0, 1)")
    if resamples < 1:
        raise ValueError("resamples must be at least 1")
    ratios = tuple(c / b for b, c in zip(baseline, candidate, strict=True))
    median = statistics.median(ratios)
    if len(ratios) == 1:
        return RatioEstimate(ratios, median, median, median, confidence)
    # A private seeded generator: the CI is reproducible and does not disturb global random state.
    rng = random.Random(seed)
    boots = sorted(statistics.median(rng.choices(ratios, k=len(ratios))) for _ in range(resamples))
    tail = (1.0 - confidence) / 2
    return RatioEstimate(
        ratios, median, quantile(boots, tail), quantile(boots, 1.0 - tail), confidence
    )


def noise_floor(values: Sequence[float]) -> float:
    """Round-to-round spread of one side: max |v / median - 1|; 0.0 below two values."""
    if len(values) < 2:
        return 0.0
    mid = statistics.median(values)
    if not mid > 0:
        raise ValueError("noise_floor needs a positive median")
    return max(abs(v / mid - 1.0) for v in values)


@dataclass(frozen=True)
class Change:
    verdict: str  # one of VERDICTS
    message: str  # one sentence with the numbers
    ratio: RatioEstimate
    test: RankTest


def _pct(x: float) -> str:
    return f"{x * 100:+.1f}%"


def judge_change(
    base_rounds: Sequence[float],
    cand_rounds: Sequence[float],
    base_samples: Sequence[float],
    cand_samples: Sequence[float],
    *,
    threshold: float,
    alpha: float,
    confidence: float = 0.95,
    higher_is_worse: bool = True,
    noise_floor: float | None = None,
    resamples: int = 2000,
    seed: int = 0,
    metric: str = "p50",
) -> Change:
    """Verdict on candidate vs baseline: fail, improved, pass or inconclusive (see module doc)."""
    if threshold < 0:
        raise ValueError("threshold must be non-negative")
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha {alpha} outside (0, 1)")
    test = mann_whitney(base_samples, cand_samples)
    est = paired_ratio(
        base_rounds, cand_rounds, confidence=confidence, resamples=resamples, seed=seed
    )
    # Signed worsening: positive is bad whichever way the metric points.
    sign = 1.0 if higher_is_worse else -1.0
    w = sign * (est.median - 1.0)
    w_lo, w_hi = sorted((sign * (est.ci_low - 1.0), sign * (est.ci_high - 1.0)))
    stated = (
        f"{metric} {_pct(est.median - 1.0)} ({confidence * 100:g}% CI "
        f"{_pct(est.ci_low - 1.0)}..{_pct(est.ci_high - 1.0)}), p={test.p_value:.3g}"
    )
    limit = f"threshold ±{threshold * 100:.1f}%"

    def change(verdict: str, why: str) -> Change:
        return Change(verdict, f"{stated}: {why}", est, test)

    if noise_floor is not None and threshold < noise_floor:
        return change(
            "inconclusive",
            f"{limit} is below this runner's measured noise floor ±{noise_floor * 100:.1f}%",
        )
    if not can_reach(test, alpha):
        return change(
            "inconclusive",
            f"sample sizes ({test.n_baseline}, {test.n_candidate}) cannot reach "
            f"p <= {alpha:g} (min p={test.min_p_value:.3g})",
        )
    significant = test.p_value <= alpha
    if w > threshold and w_lo > 0 and significant:
        return change("fail", f"worse beyond {limit}, CI excludes no change, p <= {alpha:g}")
    if -w > threshold and w_hi < 0 and significant:
        return change("improved", f"better beyond {limit}, CI excludes no change, p <= {alpha:g}")
    # A shift counts as real only when both the rank test and the CI say so.
    real_shift = significant and (w_lo > 0 or w_hi < 0)
    if w_hi <= threshold:
        return change("pass", f"the CI stays inside {limit} on the worse side")
    if abs(w) <= threshold and not real_shift:
        return change("pass", f"within {limit} and no significant change")
    if abs(w) <= threshold:
        return change("inconclusive", f"within {limit} but the CI reaches beyond it")
    if not significant:
        return change("inconclusive", f"beyond {limit} but p > {alpha:g}")
    return change("inconclusive", f"beyond {limit} but the CI includes no change")
