"""The sequential paired test: its error rates by simulation (seeded), its numbers against scipy.

The simulations model what this suite meets on CPU runners: every process has its own level
(an offset), samples inside a process are autocorrelated with heavy tails, and a process's
statistic is its median. A round pairs one process per side.
"""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
from scipy import special, stats

from suite.judge.sequential import (
    DEFAULT_LOOKS,
    Design,
    betainc,
    judge,
    look,
    needed_rounds,
    settle,
    t_critical,
    t_sf,
)

DESIGN = Design()
THRESHOLD = 0.03


@pytest.mark.parametrize("df", [1, 2, 5, 9, 13, 19, 25, 39, 120])
@pytest.mark.parametrize("level", [0.0002, 0.0008, 0.005, 0.025, 0.2])
def test_t_critical_matches_scipy(df: int, level: float) -> None:
    assert t_critical(level, df) == pytest.approx(stats.t.isf(level, df), rel=1e-9)


@pytest.mark.parametrize("a,b,x", [(0.5, 0.5, 0.3), (2.5, 0.5, 0.99), (20, 0.5, 0.5), (1, 3, 0.01)])
def test_betainc_matches_scipy(a: float, b: float, x: float) -> None:
    assert betainc(a, b, x) == pytest.approx(special.betainc(a, b, x), rel=1e-10)


def test_t_sf_both_tails() -> None:
    assert t_sf(-2.0, 7) == pytest.approx(stats.t.sf(-2.0, 7), rel=1e-10)
    assert t_sf(3.0, 7) == pytest.approx(stats.t.sf(3.0, 7), rel=1e-10)


def test_interval_matches_scipy_one_sample_t() -> None:
    rng = random.Random(3)
    d = [rng.gauss(0.02, 0.05) for _ in range(14)]
    at = look(d, math.log1p(THRESHOLD), DESIGN)
    ci = stats.ttest_1samp(d, 0.0).confidence_interval(1 - 2 * DESIGN.fail_level)
    assert at.low == pytest.approx(ci.low, rel=1e-9)
    assert at.high == pytest.approx(ci.high, rel=1e-9)


@pytest.mark.parametrize("looks", [(1,), (1, 2), DEFAULT_LOOKS])
def test_a_single_round_never_decides(looks: tuple[int, ...]) -> None:
    design = Design(looks=looks)
    for value in (-1.0, -0.2, 0.0, 0.2, 1.0):
        verdict = settle(judge([value], THRESHOLD, design))
        assert verdict.outcome == "inconclusive"
        assert verdict.undecided == "rounds"


def test_no_verdict_before_the_first_look() -> None:
    d = [0.5] * 5  # an enormous, perfectly consistent slowdown
    assert judge(d, THRESHOLD, DESIGN).outcome == "continue"
    assert judge([*d, 0.5], THRESHOLD, DESIGN).outcome == "fail"


def test_the_first_deciding_look_wins() -> None:
    # Six rounds inside the threshold pass at the first look; what comes after is not looked at.
    d = [0.001, -0.002, 0.0, 0.002, -0.001, 0.0] + [0.4] * 20
    verdict = judge(d, THRESHOLD, DESIGN)
    assert verdict.outcome == "pass" and verdict.rounds == 6


def test_budget_and_last_look_reasons() -> None:
    noisy = [0.3, -0.3, 0.25, -0.2, 0.35, -0.3, 0.2, -0.25]
    assert judge(noisy, THRESHOLD, Design(budget_exhausted=True)).undecided == "budget"
    wide = [0.3 * (-1) ** i for i in range(40)]
    verdict = judge(wide, THRESHOLD, DESIGN)
    assert verdict.outcome == "inconclusive" and verdict.undecided == "noise"
    assert verdict.needed_rounds is not None and verdict.needed_rounds > 40


def test_improved_and_fail_are_symmetric() -> None:
    rng = random.Random(5)
    d = [rng.gauss(0.1, 0.01) for _ in range(6)]
    assert judge(d, THRESHOLD, DESIGN).outcome == "fail"
    assert judge([-x for x in d], THRESHOLD, DESIGN).outcome == "improved"


def test_needed_rounds_planning_formula() -> None:
    z = stats.norm.isf(DESIGN.fail_level) + stats.norm.isf(DESIGN.pass_level)
    expected = math.ceil((z * 0.05 / math.log1p(THRESHOLD)) ** 2)
    assert needed_rounds(0.05, math.log1p(THRESHOLD), DESIGN) == expected


def _process_medians(
    rng: np.random.Generator,
    shape: tuple[int, ...],
    *,
    offset_sd: float,
    sample_sd: float,
    samples: int,
    rho: float,
) -> np.ndarray:
    """Median of `samples` autocorrelated, heavy-tailed samples per process, in log space,
    plus a per-process offset."""
    noise = np.zeros((*shape, samples))
    state = np.zeros(shape)
    scale = sample_sd * math.sqrt(1 - rho * rho) / math.sqrt(3.0)  # t(3) has variance 3
    for k in range(samples):
        state = rho * state + scale * rng.standard_t(3, size=shape)
        noise[..., k] = state
    return np.median(noise, axis=-1) + rng.normal(0.0, offset_sd, size=shape)


def _simulate(
    effect: float,
    trials: int,
    seed: int,
    *,
    offset_sd: float,
    sample_sd: float,
    samples: int,
    rho: float,
) -> tuple[float, float]:
    """(rate of fail verdicts, mean rounds used) over `trials` simulated A/Bs."""
    rng = np.random.default_rng(seed)
    fails = 0
    rounds = 0
    rounds_max = DESIGN.max_rounds
    for start in range(0, trials, 500):
        n = min(500, trials - start)
        logs = _process_medians(
            rng,
            (n, rounds_max, 2),
            offset_sd=offset_sd,
            sample_sd=sample_sd,
            samples=samples,
            rho=rho,
        )
        d = logs[:, :, 1] - logs[:, :, 0] + math.log1p(effect)
        for row in d:
            verdict = judge(row.tolist(), THRESHOLD, DESIGN)
            fails += verdict.outcome == "fail"
            rounds += verdict.rounds
    return fails / trials, rounds / trials


def test_false_fail_rate_on_simulated_aa_with_offsets_and_heavy_tails() -> None:
    rate, _ = _simulate(0.0, 6000, seed=11, offset_sd=0.04, sample_sd=0.08, samples=60, rho=0.8)
    assert rate <= 0.005


@pytest.mark.parametrize("sd", [0.01, 0.05, 0.2, 1.0])
def test_false_fail_rate_bounded_at_any_spread(sd: float) -> None:
    # Gaussian round values straight away: the worst case for a t-test's level is no case
    # at all, so the bound must hold from tiny spreads (where m > tau protects) to huge ones.
    rng = random.Random(17)
    trials = 20000
    fails = sum(
        judge([rng.gauss(0.0, sd) for _ in range(40)], THRESHOLD, DESIGN).outcome == "fail"
        for _ in range(trials)
    )
    assert fails / trials <= 0.005


def test_power_at_five_percent_on_a_moderate_noise_model() -> None:
    rate, mean_rounds = _simulate(
        0.05, 1500, seed=12, offset_sd=0.02, sample_sd=0.09, samples=100, rho=0.5
    )
    assert rate >= 0.95
    assert mean_rounds < DESIGN.max_rounds  # decided cells stop early


def test_no_change_passes_on_a_moderate_noise_model() -> None:
    rng = np.random.default_rng(13)
    logs = _process_medians(rng, (300, 40, 2), offset_sd=0.02, sample_sd=0.09, samples=100, rho=0.5)
    d = logs[:, :, 1] - logs[:, :, 0]
    verdicts = [judge(row.tolist(), THRESHOLD, DESIGN).outcome for row in d]
    assert verdicts.count("pass") / len(verdicts) >= 0.95


def test_design_rejects_bad_looks() -> None:
    with pytest.raises(ValueError, match="increasing"):
        Design(looks=(10, 6))
    with pytest.raises(ValueError, match="fail_level"):
        Design(fail_level=0.7)
