"""The instructions gate: a CPU cell's step counted in instructions under callgrind, a deterministic
measure beside wall time (suite/worker/counting.py counts, suite/execute/counting.py starts).

Each side counts the step in one fresh process first; a change of more than ONE_COUNT_SHARE of the
threshold (a verdict that could go either way on it, or a fail) is counted again, REPLICATES
processes a side, before it stands: a count is reproducible when a side's replicates lie within
REPLICATE_SPREAD of each other (max - min over the median). The change is the ratio of the two
sides' medians, a fail beyond the policy's threshold, an improvement below minus it, else a pass.
A change within ONE_COUNT_SHARE of the threshold passes on one count a side: replicates of one
build agree within 0.03% here, so a second count could not move it across the threshold, and
counting every cell twice cost half the counting phase. A count that does not reproduce is
inconclusive ("count not reproducible"), never a pass; a side that could not count (no
Valgrind, a cell that failed under it) leaves the gate untested with the reason. On a fail or
an improvement the gate names the functions whose counts moved most (what_moved), so an
operator reads why.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from suite.core.decision_records import GateRecord, Moved
from suite.core.records import Verdict
from suite.core.spec import countable
from suite.judge.policy import Gate
from suite.judge.verdicts import NO_DIRS, Dirs, Record, failure_message, gate_result

REPLICATES = 2
# A change this share of the threshold or less passes on one count a side.
ONE_COUNT_SHARE = 0.5
# Two fresh processes of one build count the same step within a few hundredths of a percent on
# this machine (0.0009% SDPA, 0.028% MLP train step, 0.025% conv stack); 0.5% leaves room and
# stays far below any threshold worth setting.
REPLICATE_SPREAD = 0.005
MOVED_SHOWN = 10
# The instrument, as the count record names it (suite/worker/counting.py METHODS).
LABELS = {"callgrind": "instructions, callgrind", "perf": "instructions, the CPU's counter"}


def per_step(records: Sequence[Record]) -> list[float]:
    """The instructions per step of each counted process that counted."""
    out = []
    for record in records:
        counted = record.get("instructions") or {}
        if record.get("status") == "ok" and counted.get("per_step"):
            out.append(float(counted["per_step"]))
    return out


def spread(values: Sequence[float]) -> float:
    """(max - min) / median: how far a side's replicates lie apart."""
    return (max(values) - min(values)) / statistics.median(values)


def _why_missing(records: Sequence[Record], side: str) -> str:
    for record in records:
        message = failure_message(record)
        if record.get("status") != "ok" and message:
            return f"the {side} could not count: {message.splitlines()[0][:300]}"
    return f"the {side} kept no count (no counting process ran, or none counted)"


NOT_COUNTED = (
    "not counted: these runs have no counts (`torch-matrix ab` counts when its policy names "
    "the gate, unless --no-count)"
)


def _applies(record: Record) -> bool:
    spec = record.get("spec") or {}
    ranks = len(record.get("ranks") or []) or 1
    params = spec.get("params") or {}
    return countable(str(spec.get("workload")), str(spec.get("backend")), params, ranks)


def _label(records: Sequence[Record]) -> str:
    first = next((r.get("instructions") or {} for r in records if r.get("instructions")), {})
    capability = first.get("capability")
    threads = first.get("threads")
    size = first.get("size") or {}
    at = "counted at " + ", ".join(f"{k}={v}" for k, v in sorted(size.items())) if size else None
    kept = sum(1 for r in records if (r.get("instructions") or {}).get("kept"))
    # Kept from an earlier run of the same cell, build and code (suite/execute/kept_counts.py)
    reused = f"{kept} of {len(records)} counts kept from earlier runs" if kept else None
    label = LABELS.get(str(first.get("method") or "callgrind"), "instructions")
    parts = [label, f"{capability} path" if capability else None, f"{threads} thread", at, reused]
    return ", ".join(p for p in parts if p and not p.startswith("None"))


def instructions_gate(
    gate: Gate,
    base: Sequence[Record],
    cand: Sequence[Record],
    results: Sequence[Record] = (),
    dirs: Dirs = NO_DIRS,
) -> GateRecord | None:
    """The verdict from both sides' counting processes; None for a cell the gate does not
    apply to (a GPU cell, a cell of several ranks, a compile or export sweep). A cell it
    applies to that nobody counted is untested, never a silent pass."""
    if not base and not cand:
        if not any(_applies(r) for r in results):
            return None
        return gate_result(gate, "untested", NOT_COUNTED, unit="instructions")
    unsupported = [r for r in [*base, *cand] if r.get("status") == "unsupported"]
    if base and cand and len(unsupported) == len(base) + len(cand):
        # As the correctness gate says of such a cell: a finding of both pins, not a gap.
        why = failure_message(unsupported[-1]).splitlines()
        message = "unsupported on both pins, no step to count" + (
            f": {why[0][:300]}" if why else ""
        )
        return gate_result(gate, "unsupported", message, unit="instructions")
    b, c = per_step(base), per_step(cand)
    for values, records, side in ((b, base, "baseline"), (c, cand, "candidate")):
        if not values:
            return gate_result(gate, "untested", _why_missing(records, side), unit="instructions")
    numbers: dict[str, Any] = {
        "unit": "instructions",
        "baseline": statistics.median(b),
        "candidate": statistics.median(c),
    }
    counted = [r for r in [*base, *cand] if r.get("status") == "ok" and r.get("instructions")]
    caps = {(r.get("instructions") or {}).get("capability") for r in counted}
    if len(caps) > 1:
        message = f"the sides counted different kernels ({', '.join(sorted(map(str, caps)))})"
        return gate_result(gate, "not-comparable", message, **numbers)
    worst = max(spread(b), spread(c))
    numbers["spread"] = worst
    change = numbers["candidate"] / numbers["baseline"] - 1.0
    numbers["change"] = change
    label = _label([*base, *cand])
    if min(len(b), len(c)) < REPLICATES and not settled_by_one_count(change, gate.threshold):
        return gate_result(
            gate,
            "inconclusive",
            f"{change:+.2%} on one count a side: a change beyond {ONE_COUNT_SHARE:.0%} of the "
            f"threshold needs {REPLICATES} counts a side to stand ({label})",
            undecided="rounds",
            **numbers,
        )
    if worst > REPLICATE_SPREAD:
        return gate_result(
            gate,
            "inconclusive",
            f"count not reproducible: replicates {worst:.3%} apart, over the "
            f"{REPLICATE_SPREAD:.1%} a count must hold ({label})",
            undecided="noise",
            **numbers,
        )
    threshold = gate.threshold or 0.0
    verdict: Verdict = (
        "fail" if change > threshold else "improved" if change < -threshold else "pass"
    )
    message = f"{change:+.2%} instructions per step ({label})"
    result = gate_result(gate, verdict, message, **numbers)
    if verdict in ("fail", "improved"):
        result["moved"] = what_moved(base, cand, dirs)
    return result


def settled_by_one_count(change: float, threshold: float | None) -> bool:
    """Whether one count a side decides: a change within ONE_COUNT_SHARE of the threshold."""
    return abs(change) <= ONE_COUNT_SHARE * (threshold or 0.0)


def _functions(records: Sequence[Record], run_dir: Path | None) -> dict[str, int] | None:
    """Per-function instruction totals of a side's first counting process that kept them (in
    the side's folder)."""
    for record in records:
        counted = record.get("instructions") or {}
        file = counted.get("functions")
        if file and run_dir:
            try:
                lines = Path(run_dir, file).read_text("utf-8").splitlines()
                loaded = {n: int(t) for t, _, n in (line.partition("\t") for line in lines) if n}
            except (OSError, ValueError):
                continue
            steps = float(counted.get("steps") or 1)
            return {name: round(total / steps) for name, total in loaded.items()}
    return None


def what_moved(base: Sequence[Record], cand: Sequence[Record], dirs: Dirs = NO_DIRS) -> list[Moved]:
    """The functions whose instructions per step moved most between the sides, largest absolute
    change first: name, baseline, candidate, change."""
    b, c = _functions(base, dirs[0]), _functions(cand, dirs[1])
    if b is None or c is None:
        return []
    changes = {name: c.get(name, 0) - b.get(name, 0) for name in b.keys() | c.keys()}
    largest = sorted((n for n, d in changes.items() if d), key=lambda n: (-abs(changes[n]), n))
    return [
        {"function": n, "baseline": b.get(n, 0), "candidate": c.get(n, 0), "change": changes[n]}
        for n in largest[:MOVED_SHOWN]
    ]
