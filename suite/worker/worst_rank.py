"""A distributed cell's figures are its worst rank's: global rank 0 folds every rank's timing
samples and memory peak into the record it writes.

Step latency: the ranks step in lockstep (every timed call runs collectives), so sample i of
every rank timed the same calls; the cell's sample i is the largest of them, the step as the
slowest rank saw it. Where the ranks timed different numbers of calls per sample the samples do
not line up, and the slowest rank's samples (by median) stand for the cell. Peak memory: the
largest peak of any rank. What rank 0 alone measured stays beside the folded figure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from suite.core import stats
from suite.core.records import Result


def fold_worst(doc: Result, parts: Sequence[Mapping[str, Any]]) -> None:
    """Replace DOC's timing and memory with the worst rank's, when every rank ran ok."""
    if len(parts) < 2 or any(p.get("status") != "ok" for p in parts):
        return
    _fold_timing(doc, parts)
    _fold_memory(doc, parts)


def _fold_timing(doc: Result, parts: Sequence[Mapping[str, Any]]) -> None:
    timing = doc.get("timing")
    samples = [p.get("samples_s") for p in parts]
    if not timing or not all(isinstance(s, list) and s for s in samples):
        return
    p50s = [stats.summarize(s)["p50"] for s in samples if s]
    slowest = max(range(len(p50s)), key=lambda r: p50s[r])
    if len({p.get("calls_per_sample") for p in parts}) == 1:
        n = min(len(s) for s in samples if s)
        folded = [max(s[i] for s in samples if s) for i in range(n)]
        how = "per-sample maximum over ranks"
    else:
        folded = list(samples[slowest] or [])
        how = "the slowest rank's samples (the ranks timed different calls per sample)"
    rank0_p50 = timing["summary"]["p50"]
    timing["samples_s"] = folded
    timing["summary"] = stats.summarize(folded)
    timing["over_ranks"] = {
        "ranks": len(parts),
        "fold": how,
        "slowest_rank": slowest,
        "rank0_p50_s": rank0_p50,
        "rank_p50_s": p50s,
    }
    noise = doc.get("noise")
    if noise is not None:
        rel = timing["summary"]["relative_iqr"]
        noise["relative_iqr"], noise["grade"] = rel, stats.noise_grade(rel)
        noise["samples"] = len(folded)
    rate = doc.get("throughput")
    if rate is not None:
        rate["value"] = stats.throughput(float(rate["items_per_iter"]), timing["summary"]["p50"])


def _fold_memory(doc: Result, parts: Sequence[Mapping[str, Any]]) -> None:
    memory = doc.get("memory")
    peaks = [p.get("peak_bytes") for p in parts]
    if not memory or not all(isinstance(b, int) for b in peaks):
        return
    ints = [int(b) for b in peaks if isinstance(b, int)]
    worst = max(range(len(ints)), key=lambda r: ints[r])
    memory["over_ranks"] = {
        "ranks": len(parts),
        "worst_rank": worst,
        "rank0_peak_bytes": memory["peak_bytes"],
        "rank_peak_bytes": ints,
    }
    memory["peak_bytes"] = ints[worst]
