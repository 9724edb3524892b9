"""Op-level difference between two torch.profiler Chrome traces, for a cell that got slower.

A latency gate says *that* the candidate is slower; the traces saved for a failing cell say
*where*. This module reads each side's trace into a table of self time and calls per op,
ranks the ops by how much their self time changed, and renders that ranking as Markdown.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from suite.core.decision_records import OpChange
from suite.report.escape import md

# The trace categories that become table entries: operators on the CPU, kernels on a device.
CPU_OP = "cpu_op"
KERNEL = "kernel"
KINDS = (CPU_OP, KERNEL)

# Ops are named in the trace's own terms, and a name alone is not unique: a compiled
# Triton kernel appears under one name both as the CPU op that launches it and as the
# kernel that runs, and those times must not be added together.
OpKey = tuple[str, str]  # (kind, name)


@dataclass(frozen=True)
class OpTotals:
    """One op's share of a trace: summed self time in microseconds, and how often it ran."""

    self_us: float
    calls: int
    kind: str


class _Span(NamedTuple):
    """A complete event's fields that the table needs; times in microseconds."""

    name: str
    cat: str
    ts: float
    dur: float


def _load_events(trace: Path) -> list[Any]:
    """The traceEvents list of a Chrome trace, or a ValueError that names the file."""
    try:
        doc = json.loads(trace.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise ValueError(f"{trace}: cannot read the profiler trace: {exc}") from exc
    events = doc.get("traceEvents") if isinstance(doc, dict) else None
    if not isinstance(events, list):
        raise ValueError(f"{trace}: $.traceEvents: not a Chrome trace (no traceEvents list)")
    return events


def _time(value: object) -> float | None:
    """A trace field as microseconds, or None where it cannot be one."""
    # bool is an int to Python, but never a time; NaN and infinities cannot be summed.
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def _spans_by_thread(trace: Path) -> dict[tuple[str, str], list[_Span]]:
    """The complete ("X") events of a trace, grouped by the pid/tid they ran on."""
    threads: dict[tuple[str, str], list[_Span]] = defaultdict(list)
    for i, event in enumerate(_load_events(trace)):
        if not isinstance(event, dict):
            raise ValueError(f"{trace}: $.traceEvents[{i}]: not an object")
        if event.get("ph") != "X":
            continue
        name, ts, dur = event.get("name"), _time(event.get("ts")), _time(event.get("dur"))
        if not isinstance(name, str) or ts is None or dur is None or dur < 0:
            raise ValueError(f"{trace}: $.traceEvents[{i}]: complete event without name/ts/dur")
        cat = event.get("cat")
        span = _Span(name, cat if isinstance(cat, str) else "", ts, dur)
        threads[(str(event.get("pid")), str(event.get("tid")))].append(span)
    return threads


def _self_times(spans: list[_Span]) -> list[float]:
    """Each span's duration less its direct children's, for spans that ran on one thread."""
    own = [span.dur for span in spans]
    stack: list[int] = []
    # Parents before children: the earlier start, or for one start the longer span.
    for i in sorted(range(len(spans)), key=lambda i: (spans[i].ts, -spans[i].dur)):
        while stack and spans[stack[-1]].ts + spans[stack[-1]].dur <= spans[i].ts:
            stack.pop()
        if stack:
            own[stack[-1]] -= spans[i].dur
        stack.append(i)
    # The trace rounds times to the nanosecond, so a child can overhang its parent by a hair.
    return [max(t, 0.0) for t in own]


def op_table(trace: Path) -> dict[OpKey, OpTotals]:
    """Self time and calls per (kind, name) for the CPU ops and device kernels of a trace.

    A CPU op's self time excludes every event nested in it on its thread, whatever the
    category (a Python frame, an annotation, a CUDA runtime call), so that time is counted
    once, where it is spent. A kernel is a leaf on its stream: its whole duration counts.
    """
    self_us: dict[OpKey, float] = defaultdict(float)
    calls: dict[OpKey, int] = defaultdict(int)
    for spans in _spans_by_thread(trace).values():
        for span, own in zip(spans, _self_times(spans), strict=True):
            if span.cat in KINDS:
                key = (span.cat, span.name)
                self_us[key] += span.dur if span.cat == KERNEL else own
                calls[key] += 1
    return {key: OpTotals(self_us[key], calls[key], key[0]) for key in sorted(self_us)}


def op_diff(baseline: Path, candidate: Path, top: int = 10) -> list[OpChange]:
    """The top ops by absolute change in self time from baseline to candidate.

    An op that ran on one side only counts as 0 µs and 0 calls on the other. Ops whose
    rounded time and calls did not change are left out: they explain nothing.
    """
    before, after = op_table(baseline), op_table(candidate)
    absent = OpTotals(0.0, 0, "")
    rows: list[OpChange] = []
    for kind, name in sorted(before.keys() | after.keys()):
        b, c = before.get((kind, name), absent), after.get((kind, name), absent)
        b_us, c_us = round(b.self_us, 1), round(c.self_us, 1)
        change = round(c_us - b_us, 1)
        if change == 0 and b.calls == c.calls:
            continue
        rows.append(
            OpChange(
                op=name,
                kind=kind,
                baseline_us=b_us,
                candidate_us=c_us,
                change_us=change,
                baseline_calls=b.calls,
                candidate_calls=c.calls,
            )
        )
    # Equal changes fall back to the name, so the same traces always give the same table.
    rows.sort(key=lambda row: (-abs(row["change_us"]), row["op"], row["kind"]))
    return rows[: max(top, 0)]


def render_op_diff(rows: Iterable[Mapping[str, Any]]) -> str:
    """A Markdown table of op_diff's rows; op names are untrusted text and are escaped."""
    lines = [
        "| op | baseline µs | candidate µs | change µs | calls b→c |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for row in rows:
        # Kernel time is device time, not CPU time: the two must not read as the same thing.
        op = md(row["op"]) + (" (kernel)" if row["kind"] == KERNEL else "")
        lines.append(
            f"| {op} | {row['baseline_us']:.1f} | {row['candidate_us']:.1f} "
            f"| {row['change_us']:+.1f} | {row['baseline_calls']}→{row['candidate_calls']} |"
        )
    if len(lines) == 2:
        return "No op changed its self time between the two traces."
    return "\n".join(lines)
