"""Summary statistics derived from raw samples.

The one place p50, p95, IQR and throughput come from. A record keeps its raw samples; as
torch.utils.benchmark's Measurement does, its statistics are derived from them when asked
(timing_of, throughput_of), so no figure can disagree with the samples it claims to summarize.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, Literal, TypedDict

# A cell whose steady-state samples spread wider than this (IQR / median) grades itself noisy.
NOISY_RELATIVE_IQR = 0.10


class Summary(TypedDict):
    n: int
    p50: float
    p95: float
    mean: float
    min: float
    max: float
    iqr: float
    relative_iqr: float


def quantile(sorted_values: Sequence[float], q: float) -> float:
    """Linear-interpolated quantile (numpy's default 'linear' method) of sorted values."""
    if not sorted_values:
        raise ValueError("quantile of no values")
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"quantile {q} outside [0, 1]")
    pos = (len(sorted_values) - 1) * q
    lo = math.floor(pos)
    hi = math.ceil(pos)
    frac = pos - lo
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * frac


def summarize(samples: Sequence[float]) -> Summary:
    if not samples:
        raise ValueError("cannot summarize an empty sample list")
    ordered = sorted(samples)
    p50 = quantile(ordered, 0.5)
    iqr = quantile(ordered, 0.75) - quantile(ordered, 0.25)
    return Summary(
        n=len(ordered),
        p50=p50,
        p95=quantile(ordered, 0.95),
        mean=math.fsum(ordered) / len(ordered),
        min=ordered[0],
        max=ordered[-1],
        iqr=iqr,
        relative_iqr=iqr / p50 if p50 > 0 else 0.0,
    )


def noise_grade(
    relative_iqr: float, threshold: float = NOISY_RELATIVE_IQR
) -> Literal["ok", "noisy"]:
    return "noisy" if relative_iqr > threshold else "ok"


def throughput(items_per_iter: float, p50_seconds: float) -> float:
    """Items per second at the median iteration time."""
    if p50_seconds <= 0:
        return 0.0
    return items_per_iter / p50_seconds


def timing_of(record: Mapping[str, Any]) -> Summary | None:
    """The statistics of a result record's steady-state samples (core.records.Result, which
    this module cannot import: records reads Summary from here), derived from them; None for a
    record that timed nothing."""
    timing = record.get("timing")
    samples = timing.get("samples_s") if timing else None
    return summarize(samples) if samples else None


def throughput_of(record: Mapping[str, Any]) -> float | None:
    """Items per second at the record's median step, derived from its samples; None for a
    workload that counts no items or a record that timed nothing."""
    rate = record.get("throughput")
    summary = timing_of(record)
    if not rate or not rate.get("items_per_iter") or summary is None:
        return None
    return throughput(float(rate["items_per_iter"]), summary["p50"])
