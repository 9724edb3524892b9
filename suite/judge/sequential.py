"""The sequential paired test behind every timing gate: the one place a timing change is judged.

The unit of analysis is the round: one fresh process per side, the side order alternating, and
one paired value per round, d = ln(candidate statistic / baseline statistic), signed so that a
positive d is worse. Drift shared by both sides of a round cancels, and autocorrelation inside
one process cannot inflate anything, because a process contributes one number.

The looks (round counts at which the data are examined) and the per-look levels are fixed by
the policy before the run. At a look with R rounds, m = mean(d), se = sd(d)/sqrt(R),
tau = ln(1 + threshold), and Student-t critical values c_f, c_p (df = R - 1):

  fail      m - c_f*se > 0 and m > tau      (worse, and worse beyond the threshold)
  improved  m + c_f*se < 0 and m < -tau
  pass      m + c_p*se < tau                 (equivalence on the worse side)
  otherwise more rounds; after the last look, inconclusive.

A per-look one-sided level of 0.001 keeps the false-fail rate of one gate over seven looks
below 0.5% (tests/test_sequential.py checks it by simulation). Standard library only: the
parent decides without numpy or scipy.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Literal

from suite.core.records import Undecided

# The gates this procedure judges; their verdicts carry rounds, spread and rounds needed.
# The gates judged from each round's steady-state timing, then compile time (first call).
STEADY_STATE_GATES = ("latency_p50", "latency_p95", "throughput")
TIMING_GATES = (*STEADY_STATE_GATES, "compile_time")
DEFAULT_LOOKS = (6, 10, 14, 20, 26, 32, 40)
DEFAULT_FAIL_LEVEL = 0.0008
DEFAULT_PASS_LEVEL = 0.005
# A verdict needs a spread, and a spread needs two rounds; one round never decides.
MIN_ROUNDS = 2

Outcome = Literal["pass", "fail", "improved", "inconclusive", "continue"]


@dataclass(frozen=True)
class Design:
    """What the policy fixes before the run, plus whether the run's time budget ran out."""

    looks: tuple[int, ...] = DEFAULT_LOOKS
    fail_level: float = DEFAULT_FAIL_LEVEL
    pass_level: float = DEFAULT_PASS_LEVEL
    budget_s: float | None = None
    budget_exhausted: bool = False

    def __post_init__(self) -> None:
        if not self.looks or list(self.looks) != sorted(set(self.looks)) or self.looks[0] < 1:
            raise ValueError(f"looks must be increasing positive round counts, got {self.looks}")
        for name in ("fail_level", "pass_level"):
            level = getattr(self, name)
            if not 0.0 < level < 0.5:
                raise ValueError(f"{name} {level} outside (0, 0.5)")

    @property
    def max_rounds(self) -> int:
        return self.looks[-1]

    def fixed(self, rounds: int) -> Design:
        """The same levels with a single look at `rounds` (a fixed design): exactly that many
        rounds, so no time budget, which belongs to the sequential looks, can take them away
        (on a slower or busier runner the budget would end the rounds earlier, and the same
        command would judge fewer rounds on one machine than on the next)."""
        return replace(self, looks=(rounds,), budget_s=None)

    def as_dict(self) -> dict[str, object]:
        return {
            "looks": list(self.looks),
            "fail_level": self.fail_level,
            "pass_level": self.pass_level,
            "budget_s": self.budget_s,
            "budget_exhausted": self.budget_exhausted,
        }

    @classmethod
    def from_dict(cls, raw: dict[str, object]) -> Design:
        looks = raw.get("looks") or DEFAULT_LOOKS
        assert isinstance(looks, (list, tuple))
        budget = raw.get("budget_s")
        return cls(
            looks=tuple(int(x) for x in looks),
            fail_level=float(raw.get("fail_level", DEFAULT_FAIL_LEVEL)),  # type: ignore[arg-type]
            pass_level=float(raw.get("pass_level", DEFAULT_PASS_LEVEL)),  # type: ignore[arg-type]
            budget_s=float(budget) if isinstance(budget, (int, float)) else None,
            budget_exhausted=bool(raw.get("budget_exhausted", False)),
        )


# --- Student t, from the regularized incomplete beta function --------------------------------


def _beta_cf(a: float, b: float, x: float) -> float:
    """Continued fraction for I_x(a, b) (modified Lentz), converging for x < (a+1)/(a+b+2)."""
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 10_000):
        m2 = 2 * m
        for num in (
            m * (b - m) * x / ((a + m2 - 1.0) * (a + m2)),
            -(a + m) * (a + b + m) * x / ((a + m2) * (a + m2 + 1.0)),
        ):
            d = 1.0 + num * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + num / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-15:
            break
    return h


def betainc(a: float, b: float, x: float) -> float:
    """Regularized incomplete beta I_x(a, b)."""
    if not 0.0 <= x <= 1.0:
        raise ValueError(f"x={x} outside [0, 1]")
    if x in (0.0, 1.0):
        return x
    log_front = (
        math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    )
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _beta_cf(a, b, x) / a
    return 1.0 - math.exp(log_front) * _beta_cf(b, a, 1.0 - x) / b


def t_sf(t: float, df: float) -> float:
    """P(T > t) for Student's t with df degrees of freedom."""
    if df <= 0:
        raise ValueError("df must be positive")
    tail = 0.5 * betainc(df / 2.0, 0.5, df / (df + t * t))
    return tail if t >= 0 else 1.0 - tail


@lru_cache(maxsize=1024)
def t_critical(level: float, df: float) -> float:
    """The c with P(T > c) = level: the one-sided critical value."""
    if not 0.0 < level < 0.5:
        raise ValueError(f"level {level} outside (0, 0.5)")
    lo, hi = 0.0, 1.0
    while t_sf(hi, df) > level:
        hi *= 2.0
    for _ in range(200):  # bisection: t_sf is monotone, and this runs once per (level, df)
        mid = (lo + hi) / 2.0
        if t_sf(mid, df) > level:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-12 * hi:
            break
    return (lo + hi) / 2.0


def z_critical(level: float) -> float:
    return statistics.NormalDist().inv_cdf(1.0 - level)


# --- the procedure -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Look:
    """The test at one look: the estimate in log space and the verdict it reached."""

    rounds: int
    mean: float
    sd: float
    low: float  # m - c_f * se
    high: float  # m + c_f * se
    outcome: Outcome


@dataclass(frozen=True)
class SequentialVerdict:
    outcome: Outcome
    rounds: int  # rounds the verdict rests on (the deciding look, else all that ran)
    change: float | None  # e^m - 1, worse-positive
    ci: tuple[float, float] | None  # [e^low - 1, e^high - 1]
    spread: float | None  # sd of d
    needed_rounds: int | None
    undecided: Undecided | None
    why: str
    log_mean: float | None = None  # m, and the interval's ends, in log space
    log_ci: tuple[float, float] | None = None


def look(d: Sequence[float], tau: float, design: Design) -> Look:
    """One look at the rounds in d (worse-positive log ratios)."""
    r = len(d)
    m = math.fsum(d) / r
    if r < MIN_ROUNDS:
        return Look(r, m, math.nan, -math.inf, math.inf, "continue")
    s = statistics.stdev(d)
    se = s / math.sqrt(r)
    c_f = t_critical(design.fail_level, r - 1)
    c_p = t_critical(design.pass_level, r - 1)
    low, high = m - c_f * se, m + c_f * se
    outcome: Outcome = "continue"
    if low > 0 and m > tau:
        outcome = "fail"
    elif high < 0 and m < -tau:
        outcome = "improved"
    elif m + c_p * se < tau:
        outcome = "pass"
    return Look(r, m, s, low, high, outcome)


def needed_rounds(spread: float, tau: float, design: Design) -> int | None:
    """Rounds that tell a change at the threshold from no change at this spread (normal approx.):
    R = ((z_f + z_p) * s / tau)^2."""
    if not spread > 0 or not tau > 0:
        return None
    z = z_critical(design.fail_level) + z_critical(design.pass_level)
    return max(MIN_ROUNDS, math.ceil((z * spread / tau) ** 2))


def judge(d: Sequence[float], threshold: float, design: Design) -> SequentialVerdict:
    """The verdict for these rounds under the design: the first look that decides, else
    'continue' while looks remain (and budget), else inconclusive with the reason."""
    if threshold < 0:
        raise ValueError("threshold must be non-negative")
    if any(not math.isfinite(x) for x in d):
        raise ValueError("round values must be finite")
    tau = math.log1p(threshold)
    last: Look | None = None
    for count in design.looks:
        if count > len(d):
            break
        last = look(d[:count], tau, design)
        if last.outcome != "continue":
            return _verdict(last, last.outcome, None, tau, design)
    current = look(d, tau, design) if d else None
    if current is None:
        return SequentialVerdict("continue", 0, None, None, None, None, None, "no rounds yet")
    if len(d) >= design.max_rounds:
        final = last or current
        why: Undecided = "rounds" if final.rounds < MIN_ROUNDS else "noise"
        return _verdict(final, "inconclusive", why, tau, design)
    if design.budget_exhausted:
        return _verdict(current, "inconclusive", "budget", tau, design)
    return _verdict(current, "continue", None, tau, design)


def _verdict(
    at: Look, outcome: Outcome, undecided: Undecided | None, tau: float, design: Design
) -> SequentialVerdict:
    spread = at.sd if math.isfinite(at.sd) else None
    ci = None
    if math.isfinite(at.low) and math.isfinite(at.high):
        ci = (ratio_change(at.low), ratio_change(at.high))
    needed = needed_rounds(spread, tau, design) if spread is not None else None
    return SequentialVerdict(
        outcome=outcome,
        rounds=at.rounds,
        change=ratio_change(at.mean),
        ci=ci,
        spread=spread,
        needed_rounds=needed if outcome in ("inconclusive", "continue") else None,
        undecided=undecided,
        why=_why(outcome, undecided, at, design, needed),
        log_mean=at.mean,
        log_ci=(at.low, at.high) if ci is not None else None,
    )


def ratio_change(log_ratio: float) -> float:
    """e^x - 1, held to a finite number: a round of 1 s against 1 ms is possible under load."""
    return math.expm1(max(-50.0, min(50.0, log_ratio)))


def _why(
    outcome: Outcome, undecided: Undecided | None, at: Look, design: Design, needed: int | None
) -> str:
    if outcome == "fail":
        return "worse beyond the threshold"
    if outcome == "improved":
        return "better beyond the threshold"
    if outcome == "pass":
        return "the interval stays inside the threshold on the worse side"
    spread = f"spread {at.sd:.1%}" if math.isfinite(at.sd) else "no spread from one round"
    need = f", ≈{needed} rounds needed" if needed else ""
    if undecided == "noise":
        return f"not resolved by the last look ({design.max_rounds} rounds): {spread}{need}"
    if undecided == "budget":
        return f"the time budget ran out after {at.rounds} rounds: {spread}{need}"
    if undecided == "rounds":
        return f"too few rounds to decide ({at.rounds}): {spread}{need}"
    return f"undecided after {at.rounds} rounds: {spread}{need}"


def settle(verdict: SequentialVerdict) -> SequentialVerdict:
    """A 'continue' when no more rounds will come: inconclusive, too few rounds ran."""
    if verdict.outcome != "continue":
        return verdict
    why = verdict.why.replace("undecided after", "too few rounds to decide after", 1)
    return replace(verdict, outcome="inconclusive", undecided="rounds", why=why)
