"""Plain-text reports: the terminal table, and the rows x gates summary every format shares.

The summary helpers (gate order, worst verdict per row and gate, value formatting) return
raw text; each renderer escapes it for its own output.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from tabulate import tabulate

from suite.core.decision_records import Cell, DecisionRecord, GateRecord, Row, SideEvidence
from suite.report.escape import cap, one_line, plain

GATE_ORDER = (
    "status",
    "correctness",
    "latency_p50",
    "latency_p95",
    "throughput",
    "peak_memory",
    "memory_budget",
)
# Worst first: a row x gate summary shows the worst verdict among the row's cells.
VERDICT_ORDER = (
    "new-failure",
    "fail",
    "not-comparable",
    "inconclusive",
    "untested",
    "unsupported",
    "pass",
    "fixed",
    "improved",
)
# Verdicts that put a cell under "needing attention" in the Markdown report; a cell whose
# only such verdict is inconclusive is listed on one line there rather than given a section.
ATTENTION = frozenset({"new-failure", "fail", "not-comparable", "inconclusive"})
GOOD = frozenset({"pass", "fixed", "improved"})
LANES = (("production", "Production lane"), ("prototype", "Prototype lane"))
NONE = "—"
# Units are the gate logic's; gate names are the fallback when a gate records no unit.
_SECONDS_UNITS = frozenset({"s", "sec", "seconds"})
_BYTES_UNITS = frozenset({"B", "byte", "bytes"})
_SECONDS_GATES = frozenset({"latency_p50", "latency_p95"})
_BYTES_GATES = frozenset({"peak_memory", "memory_budget"})
# Names listed in the line for rows without evidence, and the length kept of each.
_ABSENT_NAMES = 20
_NAME_LIMIT = 60


def badness(verdict: str) -> int:
    """Position in VERDICT_ORDER; an unknown verdict counts as the worst (fail safe)."""
    return VERDICT_ORDER.index(verdict) if verdict in VERDICT_ORDER else 0


def gate_names(decision: DecisionRecord) -> list[str]:
    """Gate names present in the record: the known ones in a fixed order, then the rest."""
    present = {g["gate"] for cell in decision["cells"] for g in cell["gates"]}
    known = [name for name in GATE_ORDER if name in present]
    return known + sorted(present - set(GATE_ORDER))


def cells_of(decision: DecisionRecord, row_id: str) -> list[Cell]:
    return [cell for cell in decision["cells"] if cell["row_id"] == row_id]


def gate_of(cell: Cell, name: str) -> GateRecord | None:
    return next((g for g in cell["gates"] if g["gate"] == name), None)


def worst(verdicts: Iterable[str]) -> str | None:
    return min(verdicts, key=badness, default=None)


def summarize(verdicts: list[str], severity: str | None = None) -> str:
    """The worst verdict; in parentheses its gate's severity where it did not pass, and
    'k/n' when only k of the row's n cells have it (LEGEND)."""
    top = worst(verdicts)
    if top is None:
        return NONE
    notes = [severity] if severity and top not in GOOD else []
    if len(set(verdicts)) > 1:
        notes.append(f"{verdicts.count(top)}/{len(verdicts)}")
    return f"{top} ({', '.join(notes)})" if notes else top


LEGEND = (
    "Each gate column holds the row's worst verdict; in parentheses the gate's severity where "
    "it did not pass (hard and required gates block, soft and budget ones defer, info ones "
    "only inform) and k/n where only k of the row's n cells have that verdict."
)


def absent_rows(decision: DecisionRecord) -> list[Row]:
    """Rows whose every cell was skipped on both sides: the backend is absent on this runner.

    They hold no evidence, only 'untested' in every column, so the tables leave them out and
    one line names them instead: on a CPU runner they would otherwise be most of the table.
    """
    skipped: dict[str, bool] = {}
    for cell in decision["cells"]:
        both = cell["baseline_status"] == "skipped" and cell["candidate_status"] == "skipped"
        skipped[cell["row_id"]] = skipped.get(cell["row_id"], True) and both
    return [row for row in decision["rows"] if skipped.get(row["row_id"], False)]


def _names(values: Iterable[str]) -> str:
    return ", ".join(cap(one_line(v), _NAME_LIMIT) for v in values)


def absent_text(decision: DecisionRecord) -> str | None:
    """Raw text naming the rows of absent_rows, workloads grouped by the backends they miss,
    then the cells skipped on both sides in rows that hold evidence (a package neither side
    has, such as torchcomms): each row's table verdicts leave them out of sight."""
    texts = [t for t in (_absent_rows_text(decision), _skipped_cells_text(decision)) if t]
    return " ".join(texts) if texts else None


def _skipped_cells_text(decision: DecisionRecord) -> str | None:
    absent = {row["row_id"] for row in absent_rows(decision)}
    why: dict[str, list[str]] = {}
    for cell in decision["cells"]:
        both = cell["baseline_status"] == "skipped" and cell["candidate_status"] == "skipped"
        if both and cell["row_id"] not in absent:
            message = str((gate_of(cell, "status") or {}).get("message") or "")
            reason = message.removeprefix("skipped on both pins: ")
            if reason == message:
                reason = message.partition("): ")[2]
            why.setdefault(reason, []).append(cell["cell_id"])
    if not why:
        return None
    parts = [
        f"{_names(ids[:_ABSENT_NAMES])}"
        + (f" and {len(ids) - _ABSENT_NAMES} more" if len(ids) > _ABSENT_NAMES else "")
        + (f" ({cap(one_line(reason), _NAME_LIMIT * 2)})" if reason else "")
        for reason, ids in why.items()
    ]
    return "Skipped on both sides, no evidence either way: " + "; ".join(parts) + "."


def _absent_rows_text(decision: DecisionRecord) -> str | None:
    rows = absent_rows(decision)
    if not rows:
        return None
    missing: dict[str, list[str]] = {}
    for row in rows:
        missing.setdefault(row["workload"], []).append(row["backend"])
    # Workloads that miss the same backends share one "w1, w2 on b1, b2" group.
    groups: dict[tuple[str, ...], list[str]] = {}
    for workload, backends in missing.items():
        groups.setdefault(tuple(backends), []).append(workload)
    parts: list[str] = []
    left = _ABSENT_NAMES
    for group, workloads in groups.items():
        if left > 0:
            where = "each" if len(groups) == 1 else _names(group)
            parts.append(f"{_names(workloads[:left])} on {where}")
            left -= len(workloads)
    if left < 0:
        parts.append(f"and {-left} more workloads")
    every = dict.fromkeys(row["backend"] for row in rows)
    why = _skip_reasons(decision, set(every))
    because = "; ".join(f"{b}: {cap(one_line(w), _NAME_LIMIT * 2)}" for b, w in why.items())
    return (
        f"No evidence on {_names(every)} (every cell skipped on both sides"
        + (f" — {because}" if because else "")
        + f"): {len(rows)} row{'' if len(rows) == 1 else 's'} left out of the tables — "
        + "; ".join(parts)
    )


def _skip_reasons(decision: DecisionRecord, backends: set[str]) -> dict[str, str]:
    """Why each backend's cells were skipped: the first skipped cell's status message."""
    found: dict[str, str] = {}
    for cell in decision["cells"]:
        if cell["backend"] in backends and cell["backend"] not in found:
            status = gate_of(cell, "status")
            _, colon, why = str((status or {}).get("message") or "").partition("): ")
            if colon and why:
                found[cell["backend"]] = why
    return found


def summary_rows(decision: DecisionRecord, lane: str, gates: list[str]) -> list[list[str]]:
    """One raw-text row per row_id of the lane: row, lane, decision, then one cell per gate.

    Rows of absent_rows are left out; absent_text names them.
    """
    out: list[list[str]] = []
    absent = {row["row_id"] for row in absent_rows(decision)}
    for row in decision["rows"]:
        if row["lane"] != lane or row["row_id"] in absent:
            continue
        cells = cells_of(decision, row["row_id"])
        line = [row["row_id"], row["lane"], row["decision"]]
        for name in gates:
            found = [g for g in (gate_of(cell, name) for cell in cells) if g is not None]
            top = worst(g["verdict"] for g in found)
            severity = next((g.get("severity") for g in found if g["verdict"] == top), None)
            line.append(summarize([g["verdict"] for g in found], severity))
        out.append(line)
    return out


def _sig(x: float) -> str:
    """Three significant digits without switching to exponent notation."""
    a = abs(x)
    if a >= 99.95:
        return f"{x:.0f}"
    if a >= 9.995:
        return f"{x:.1f}"
    return f"{x:.2f}"


def format_seconds(value: float) -> str:
    for scale, name in ((1.0, "s"), (1e-3, "ms"), (1e-6, "µs")):
        # 0.9995 so that 999.96 µs is shown as 1.00 ms, not 1000 µs.
        if abs(value) >= scale * 0.9995:
            return f"{_sig(value / scale)} {name}"
    return "0 s" if value == 0 else f"{_sig(value / 1e-9)} ns"


def format_bytes(value: float) -> str:
    a = abs(value)
    if a >= 2**30:
        return f"{value / 2**30:.2f} GiB"
    if a >= 2**20:
        return f"{value / 2**20:.1f} MiB"
    if a >= 2**10:
        return f"{value / 2**10:.1f} KiB"
    return f"{value:.0f} B"


def format_rate(value: float, unit: str) -> str:
    for scale, prefix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= scale * 0.9995:
            return f"{_sig(value / scale)}{prefix} {unit}"
    return f"{_sig(value)} {unit}"


def format_value(value: Any, unit: str | None = None, gate: str = "") -> str:
    """A gate's baseline or candidate value, in the unit the gate recorded."""
    if value is None:
        return NONE
    if isinstance(value, bool):  # before int: bool is an int subclass
        return "true" if value else "false"
    if not isinstance(value, (int, float)):
        return str(value)
    if unit in _SECONDS_UNITS or (unit is None and gate in _SECONDS_GATES):
        return format_seconds(value)
    if unit in _BYTES_UNITS or (unit is None and gate in _BYTES_GATES):
        return format_bytes(value)
    if unit and unit.endswith("/s"):
        return format_rate(value, unit)
    number = str(value) if isinstance(value, int) else f"{value:.4g}"
    return f"{number} {unit}" if unit else number


def format_change(change: float | None) -> str:
    return NONE if change is None else f"{change * 100:+.1f}%"


def format_ci(ci: list[float] | None) -> str:
    return NONE if not ci else f"[{ci[0] * 100:+.1f}%, {ci[1] * 100:+.1f}%]"


def format_p(p: float | None) -> str:
    return NONE if p is None else f"{p:.2g}"


def format_threshold(threshold: float | None) -> str:
    return NONE if threshold is None else f"{threshold * 100:.3g}%"


def side_text(side: SideEvidence) -> str:
    return f"{side['label']} (torch {side['torch']}, run {side['run_id']})"


def _json_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)


def warnings(decision: DecisionRecord) -> list[str]:
    """Reasons to distrust the comparison itself: policy drift and incomparable sides."""
    out = [
        f"captured under a different policy hash: {m}"
        for m in decision["policy"].get("mismatches", [])
    ]
    differences = decision["comparable"]["differences"]
    out += [
        f"not comparable: {d['field']}: baseline {_json_text(d['baseline'])}, "
        f"candidate {_json_text(d['candidate'])}"
        for d in differences
    ]
    if not decision["comparable"]["ok"] and not differences:
        out.append("baseline and candidate are not comparable")
    return out


def render_table(decision: DecisionRecord) -> str:
    """Decision, reasons, sides and warnings, one tabulate grid per lane, rows without evidence."""
    lines = [f"torch-matrix decision: {plain(decision['decision']).upper()}"]
    lines += [f"  - {plain(reason)}" for reason in decision["reasons"]]
    policy = decision["policy"]
    lines += [
        f"baseline:  {plain(side_text(decision['baseline']))}",
        f"candidate: {plain(side_text(decision['candidate']))}",
        f"policy:    {plain(policy['profile'])} (sha256 {plain(policy['sha256'][:12])})",
    ]
    lines += [f"warning: {plain(w)}" for w in warnings(decision)]
    gates = gate_names(decision)
    headers = ["row", "lane", "decision", *(plain(g) for g in gates)]
    for lane, title in LANES:
        rows = summary_rows(decision, lane, gates)
        if rows:
            grid = [[plain(text) for text in row] for row in rows]
            lines += ["", title, tabulate(grid, headers=headers, tablefmt="simple")]
    absent = absent_text(decision)
    if absent:
        lines += ["", plain(absent, None)]
    return "\n".join(lines) + "\n"
