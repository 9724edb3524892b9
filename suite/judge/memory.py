"""The peak_memory gate: a change in the most memory a cell's step holds, judged from every round's
reading on both sides, so that `fail` and `improved` hold at a stated error rate.

Each round's memory pass gives one peak per side (suite/worker/memory.py: on the CPU the most
bytes the tensors held at once, from the allocator's events; on CUDA and ROCm the caching
allocator's peak; on MPS the driver's allocation, sampled). Two ways to a verdict:

- **A figure that repeats.** When each side has at least two readings and they lie within
  REPEAT_SPREAD of each other (max - min over the median), the figure is deterministic: the
  change is the ratio of the medians, a fail beyond the threshold, an improvement below minus
  it, else a pass. The allocator figures repeat exactly on a deterministic step.
- **A figure that spreads** (RSS, the MPS driver's samples, a step whose allocations vary): a
  rank rule. With the candidate's readings scaled down by (1 + threshold), `fail` needs every
  one of them above every baseline reading; `improved` needs every candidate reading below every
  baseline reading scaled down by (1 - threshold); `pass` needs every candidate reading, scaled
  down, below every baseline reading. Where the two sides' readings are exchangeable (a change of
  exactly the threshold, on a scale), all of one side above all of the other happens with
  probability 1 / C(m + n, m); a verdict is given only when that is at most LEVEL (1%: five
  readings a side), else the gate is `inconclusive` with the readings' spread, never `fail`.

Growth within the gate's min_bytes passes whatever the spread: below it no change is worth a
verdict.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

from suite.core.decision_records import GateRecord
from suite.judge.policy import Gate
from suite.judge.verdicts import gate_result

# Two processes of one build, on a deterministic step, read the same allocator peak; 1% leaves
# room for an allocation whose size depends on the machine's thread count.
REPEAT_SPREAD = 0.01
LEVEL = 0.01


def _size(nbytes: int) -> str:
    """16 KiB, 1.0 MiB: a floor as the policy would write it."""
    return f"{nbytes / 2**20:.1f} MiB" if nbytes >= 2**20 else f"{nbytes / 2**10:.0f} KiB"


def spread(values: Sequence[int]) -> float:
    """(max - min) / median; 0 for one reading."""
    mid = statistics.median(values)
    return (max(values) - min(values)) / mid if mid > 0 else 0.0 if max(values) == 0 else 1.0


def repeats(values: Sequence[int]) -> bool:
    return len(values) >= 2 and spread(values) <= REPEAT_SPREAD


def separation_level(m: int, n: int) -> float:
    """The chance that all n readings of one side lie above all m of the other when the m + n
    readings are exchangeable: 1 / C(m + n, m)."""
    return 1.0 / math.comb(m + n, m)


def memory_gate(gate: Gate, bp: Sequence[int], cp: Sequence[int], comparable: bool) -> GateRecord:
    """The verdict on peak memory from each side's per-round peaks (bp, cp)."""
    if not bp or not cp:
        return gate_result(gate, "untested", "no peak-memory reading on both sides")
    if not comparable:
        return gate_result(
            gate, "not-comparable", "the two sides ran on different machines or images"
        )
    assert gate.threshold is not None
    b, c = int(statistics.median(bp)), int(statistics.median(cp))
    numbers = {"unit": "B", "baseline": b, "candidate": c, "change": (c / b - 1) if b > 0 else None}
    text = f"peak {b / 2**20:.1f} MiB -> {c / 2**20:.1f} MiB"
    if abs(c - b) <= gate.min_bytes:
        return gate_result(gate, "pass", f"{text}: within {_size(gate.min_bytes)}", **numbers)
    rel = (c - b) / b if b > 0 else math.inf
    if repeats(bp) and repeats(cp):
        said = f"{text} ({rel:+.1%}; each side's {len(bp)}/{len(cp)} readings repeat)"
        if rel > gate.threshold:
            return gate_result(gate, "fail", f"{said} > {gate.threshold:.0%}", **numbers)
        if rel < -gate.threshold:
            return gate_result(gate, "improved", said, **numbers)
        return gate_result(gate, "pass", f"{said}, threshold {gate.threshold:.0%}", **numbers)
    return _ranked(gate, bp, cp, f"{text} ({rel:+.1%})", numbers)


def _ranked(
    gate: Gate, bp: Sequence[int], cp: Sequence[int], text: str, numbers: dict[str, object]
) -> GateRecord:
    """The rank rule on readings that spread (see the module docstring)."""
    assert gate.threshold is not None
    up, down = 1.0 + gate.threshold, 1.0 - gate.threshold
    level = separation_level(len(bp), len(cp))
    spreads = f"readings spread {spread(bp):.0%} and {spread(cp):.0%}"
    if level > LEVEL:
        return gate_result(
            gate,
            "inconclusive",
            f"{text}: {len(bp)} and {len(cp)} readings that do not repeat ({spreads}) cannot "
            f"tell a change from their spread at {LEVEL:.0%}",
            **numbers,
        )
    counted = f"every one of {len(cp)} candidate readings vs {len(bp)} baseline ({spreads})"
    if min(cp) / up > max(bp):
        return gate_result(
            gate, "fail", f"{text}: {counted} above +{gate.threshold:.0%}", **numbers
        )
    if down > 0 and max(cp) < min(bp) * down:
        return gate_result(gate, "improved", f"{text}: {counted} below", **numbers)
    if max(cp) / up < min(bp):
        return gate_result(gate, "pass", f"{text}: {counted} within", **numbers)
    return gate_result(
        gate,
        "inconclusive",
        f"{text}: the readings ({spreads}) straddle the {gate.threshold:.0%} threshold",
        **numbers,
    )
