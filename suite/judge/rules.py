"""Decision rules: gate verdicts -> a decision per (cell, gate), per row and overall.

A row is one workload on one backend. Rows in the prototype lane, or matched by the policy's
isolatable patterns, never go past 'isolate'. The exit code of ab and compare is derived from
the overall decision here and nowhere else.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from suite.core.decision_records import Cell, GateRecord, Row
from suite.core.records import DECISIONS, EXIT_CODES, UNDECIDED_WHY, Decision
from suite.judge.policy import Policy, decision_rank, worst
from suite.judge.sequential import TIMING_GATES

_Num = TypeVar("_Num", int, float)


def exit_code(decision: Decision) -> int:
    return EXIT_CODES[decision]


@dataclass
class _RowTally:
    """A row's decision while its cells' gates are read: reasons ranked by their decision."""

    row: Row
    reasons: list[tuple[int, str]] = field(default_factory=list)
    verdicts: Counter[str] = field(default_factory=Counter)


def _gate_decision(policy: Policy, cell: Cell, gate: GateRecord, tally: _RowTally) -> None:
    fleet = tally.row["fleet"]
    tally.verdicts[gate["verdict"]] += 1
    gate_obj = policy.gates[gate["gate"]]
    matched = [
        r
        for r in policy.rules
        if r.matches(gate_obj, gate["verdict"], fleet=fleet, lane=cell["lane"])
    ]
    # No rule matched: nothing this policy says stands in the way of this verdict.
    decision = worst([r.decision for r in matched]) if matched else "adopt"
    gate["decision"] = decision
    if matched and decision != "adopt":
        # The most specific rule of the worst decision explains it best.
        rule = max(matched, key=lambda r: (decision_rank(r.decision), r.gate is not None))
        why = rule.reason or rule.decision
        reason = f"{cell['cell_id']}: {gate['gate']} {gate['verdict']} — {why}"
        tally.reasons.append((decision_rank(decision), reason))
        tally.row["decision"] = worst([tally.row["decision"], decision])


def _settled(tally: _RowTally) -> Row:
    row = tally.row
    capped = row["lane"] == "prototype" or row["isolatable"]
    if capped and decision_rank(row["decision"]) > decision_rank("isolate"):
        why = "prototype lane" if row["lane"] == "prototype" else "isolatable by policy"
        tally.reasons.append(
            (-1, f"{row['row_id']} capped at isolate ({why}; was {row['decision']})")
        )
        row["decision"] = "isolate"
    row["reasons"] = [r for _, r in sorted(tally.reasons, key=lambda x: -x[0])]
    row["verdicts"] = dict(sorted(tally.verdicts.items()))
    return row


def apply_rules(policy: Policy, cells: Sequence[Cell]) -> list[Row]:
    """Annotate every gate with its decision; return the rows with their decisions and reasons."""
    tallies: dict[str, _RowTally] = {}
    for cell in cells:
        tally = tallies.get(cell["row_id"])
        if tally is None:
            tally = tallies[cell["row_id"]] = _RowTally(
                {
                    "row_id": cell["row_id"],
                    "workload": cell["workload"],
                    "backend": cell["backend"],
                    "lane": cell["lane"],
                    "fleet": cell["backend"] in policy.fleet_backends,
                    "isolatable": policy.is_isolatable(cell["workload"], cell["backend"]),
                    "decision": "adopt",
                    "reasons": [],
                    "verdicts": {},
                }
            )
        if cell["lane"] == "prototype":
            tally.row["lane"] = "prototype"
        for gate in cell["gates"]:
            _gate_decision(policy, cell, gate, tally)
    return [_settled(tally) for tally in tallies.values()]


# Verdicts that settle a gate either way; the rest leave it open.
_DECIDED = ("pass", "improved", "fail")
_PASSING = frozenset({"pass", "improved", "fixed"})
# A row with only these verdicts took no measurement at all (its backend was absent, say).
_NOTHING_MEASURED = frozenset({"untested", "unsupported"})
# An en dash between the ends of a range; a hyphen would read as a minus sign next to a percent.
_TO = "\u2013"


def overall(rows: Sequence[Row], cells: Sequence[Cell] = ()) -> tuple[Decision, list[str]]:
    """The worst row decision and its reasons, then one line per timing gate in cells.

    An adopt says what the rows showed, not just that no rule blocked them: the research
    profile lets inconclusive and untested soft gates through, and a headline of "pass"
    would then claim evidence that was never taken.
    """
    judged = _judged(cells) if cells else len(rows)
    if not rows or not judged:
        # Nothing measured on both sides is no evidence of anything: never adopt on it.
        what = "no cell ran" if not rows else "every gate of every cell is untested or unsupported"
        return "defer", [f"nothing was judged: {what}", *timing_lines(cells)]
    decision = worst([r["decision"] for r in rows])
    if decision == "adopt":
        reasons = [_adopt_line(rows)]
    else:
        reasons = []
        for row in rows:
            if row["decision"] == decision:
                first = row["reasons"][0] if row["reasons"] else ""
                more = len(row["reasons"]) - 1
                reasons.append(
                    f"{row['row_id']} → {decision}: {first}"
                    + (f" (+{more} more)" if more > 0 else "")
                )
    return decision, reasons + timing_lines(cells)


def _judged(cells: Sequence[Cell]) -> int:
    """How many cells of the matrix (not the rollback checks beside it) have a gate that settled
    either way."""
    settled = {*_DECIDED, "fixed", "new-failure"}
    return sum(
        1
        for cell in cells
        if cell["workload"] != "rollback" and any(g["verdict"] in settled for g in cell["gates"])
    )


def _adopt_line(rows: Sequence[Row]) -> str:
    passing = 0
    open_rows: list[str] = []
    empty_rows: list[str] = []
    open_verdicts: Counter[str] = Counter()
    empty_verdicts: set[str] = set()
    for row in rows:
        verdicts = row["verdicts"]
        if verdicts and set(verdicts) <= _PASSING:
            passing += 1
        elif set(verdicts) <= _NOTHING_MEASURED:
            empty_rows.append(row["row_id"])
            empty_verdicts.update(verdicts)
        else:
            open_rows.append(row["row_id"])
            open_verdicts.update({v: n for v, n in verdicts.items() if v not in _PASSING})
    if passing == len(rows):
        return (
            "the only row passes every gate"
            if passing == 1
            else f"all {passing} rows pass every gate"
        )
    parts = []
    if passing:
        parts.append(f"{passing} {'passes' if passing == 1 else 'pass'} every gate")
    if open_rows:
        has = "has" if len(open_rows) == 1 else "have"
        parts.append(
            f"{len(open_rows)} {has} gates that did not pass ({_tally(open_verdicts)}): "
            + _row_names(open_rows)
        )
    if empty_rows:
        every = " or ".join(sorted(empty_verdicts))
        parts.append(
            f"{len(empty_rows)} measured nothing"
            + (f" (every gate {every})" if every else "")
            + f", on {', '.join(dict.fromkeys(r.rpartition('@')[2] for r in empty_rows))}"
        )
    return f"no rule blocks any of {_count(len(rows), 'row')}: " + "; ".join(parts)


def _row_names(row_ids: list[str], shown: int = 3) -> str:
    more = f" and {len(row_ids) - shown} more" if len(row_ids) > shown else ""
    return ", ".join(row_ids[:shown]) + more


# The gates a summary line follows: the timing gates, and the instruction count beside them.
SUMMARIZED = (*TIMING_GATES, "instructions")


def timing_lines(cells: Sequence[Cell]) -> list[str]:
    """Per timing gate and the instructions gate: in how many of the cells that ran it decided,
    after how many rounds, and why not; and how many cells were skipped on both sides (a
    backend absent here), which no gate could judge and no count includes."""
    skipped = [
        c for c in cells if c.get("baseline_status") == c.get("candidate_status") == "skipped"
    ]
    found: dict[str, list[GateRecord]] = {}
    for cell in cells:
        if cell in skipped:
            continue
        for gate in cell["gates"]:
            if gate["gate"] in SUMMARIZED:
                found.setdefault(gate["gate"], []).append(gate)
    lines = [_timing_line(name, found[name]) for name in SUMMARIZED if name in found]
    if skipped and lines:
        backends = ", ".join(sorted({c["backend"] for c in skipped}))
        lines.append(
            f"{_count(len(skipped), 'cell')} skipped on both sides ({backends}: a backend or "
            "dependency absent here), not counted above"
        )
    return lines


def _timing_line(name: str, gates: list[GateRecord]) -> str:
    by_verdict: dict[str, list[GateRecord]] = {}
    for gate in gates:
        by_verdict.setdefault(gate["verdict"], []).append(gate)
    decided = [g for v in _DECIDED for g in by_verdict.get(v, [])]
    head = f"{name} decided in {len(decided)} of {_count(len(gates), 'cell')}"
    if decided:
        head += f" ({_tally({v: len(by_verdict[v]) for v in _DECIDED if v in by_verdict})})"
    parts = [head + _after(decided)]
    for verdict, group in by_verdict.items():
        if verdict == "inconclusive":
            parts.append(f"{len(group)} inconclusive ({'; '.join(_why_open(group))})")
        elif verdict not in _DECIDED:
            parts.append(f"{len(group)} {verdict}")
    return "; ".join(parts)


def _why_open(gates: list[GateRecord]) -> list[str]:
    """Inconclusive timing gates grouped by their recorded cause, with their numbers."""
    groups: dict[str | None, list[GateRecord]] = {}
    for gate in gates:
        why = gate.get("undecided")
        groups.setdefault(why if why in UNDECIDED_WHY else None, []).append(gate)
    out = []
    for why in (*UNDECIDED_WHY, None):
        group = groups.get(why)
        if not group:
            continue
        # Records older than the `undecided` field say why only in the gate's message.
        text = f"{len(group)} {UNDECIDED_WHY[why] if why else 'cause not recorded'}"
        spreads = [s for g in group if (s := g.get("spread")) is not None]
        needed = [n for g in group if (n := g.get("needed_rounds")) is not None]
        # "2 too noisy: spread 8.4-12% after 20 rounds, ≈49-96 rounds needed"
        if spreads:
            text += f": spread {_span(spreads, _percent)}%"
        text += _after(group)
        if needed:
            text += f", ≈{_span(needed, str)} rounds needed"
        out.append(text)
    return out


def _after(gates: Sequence[GateRecord]) -> str:
    rounds = [n for g in gates if (n := g.get("rounds")) is not None]
    if not rounds:
        return ""
    return f" after {_span(rounds, str)} round{'' if max(rounds) == 1 else 's'}"


def _span(values: Sequence[_Num], fmt: Callable[[_Num], str]) -> str:
    low, high = fmt(min(values)), fmt(max(values))
    return low if low == high else f"{low}{_TO}{high}"


def _percent(x: float) -> str:
    """A fraction in percent, without the sign: two digits are all a spread needs."""
    return f"{x * 100:.1f}" if x < 0.1 else f"{x * 100:.0f}"


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _tally(counts: Mapping[str, int]) -> str:
    return ", ".join(f"{n} {verdict}" for verdict, n in counts.items())


__all__ = [
    "DECISIONS",
    "EXIT_CODES",
    "TIMING_GATES",
    "UNDECIDED_WHY",
    "apply_rules",
    "exit_code",
    "overall",
    "timing_lines",
]
