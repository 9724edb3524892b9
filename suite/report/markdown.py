"""GitHub Markdown report: decision, reasons, lane tables, then the failing cells' sections.

Meant for a pull-request comment, so every value from the record goes through
suite.report.escape, and render_markdown can shrink the body to a comment size limit.
Rows without evidence and cells that are merely undecided get one line each, not a table
row or a section: on a CPU runner they are most of the matrix and would bury the findings.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import quote

from suite.core.decision_records import Cell, DecisionRecord, GateRecord
from suite.core.records import DECISIONS, UNDECIDED_WHY
from suite.report.cell_section import cell_section, table_line
from suite.report.escape import cap, code_span, md
from suite.report.scaling import scaling_table
from suite.report.table import (
    ATTENTION,
    LANES,
    LEGEND,
    absent_text,
    badness,
    format_change,
    gate_names,
    summary_rows,
    warnings,
    worst,
)

_SECTIONS_TITLE = "### Cells needing attention"
# Undecided cells named in full; the rest are counted. The JSON record has them all.
_UNDECIDED_LISTED = 10
# An old record says why a gate is undecided only in its message; this much of it is shown.
_MESSAGE_LIMIT = 80
# Characters a link destination may keep; the rest (spaces, parentheses, angle brackets,
# backticks, non-ASCII) are percent-encoded so the URL cannot end the link early.
_URL_SAFE = ":/?#&=%+;,@!$'*~"


@dataclass(frozen=True)
class _Parts:
    head: list[str]
    # (title and header lines, body lines) per lane with rows
    tables: list[tuple[str, list[str]]]
    # The line naming the rows without evidence: short, so it is never cut.
    absent: str | None
    sections: list[str]
    # The one block listing cells whose only attention verdict is inconclusive: the
    # least severe finding, so it is the first thing truncation cuts.
    undecided: str | None
    # Each scaling row's efficiencies on both pins: a few lines, never cut.
    scaling: str | None = None

    @property
    def row_count(self) -> int:
        return sum(len(rows) for _, rows in self.tables)


def _when(stamp: str) -> str:
    """2026-12-03T13:50:55.190Z as 2026-12-03 13:50 UTC; anything else as it is."""
    found = re.match(r"^(\d{4}-\d{2}-\d{2})T(\d{2}:\d{2})", stamp)
    return f"{found[1]} {found[2]} UTC" if found else stamp


def _short(label: str) -> str:
    """A side's label with image digests cut to 12 hex digits: the records keep them whole."""
    return re.sub(r"(sha256:[0-9a-f]{12})[0-9a-f]{52}", r"\1…", label)


def _link(text: str, url: str) -> str:
    return f"[{md(text)}]({quote(url, safe=_URL_SAFE)})"


def _head(decision: DecisionRecord, run_url: str | None = None) -> list[str]:
    """Line 1 the decision; lines 2 and 3 what was compared, when, and where it ran; then the
    reasons (each naming its rows), warnings and the legend of the tables."""
    matrix = decision.get("matrix")
    name = matrix["name"] if matrix else None
    title = f"## torch-matrix: **{md(str(decision['decision']).upper())}**"
    if name:
        title += f" · matrix {md(str(name))}"
    source = decision.get("source") or {}
    base, cand = decision["baseline"], decision["candidate"]
    where = []
    if source.get("base_sha") or source.get("head_sha"):
        shas = [code_span(str(source.get(k) or "?")[:10]) for k in ("base_sha", "head_sha")]
        where.append(f"base {shas[0]} → head {shas[1]}")
    where.append(f"torch {md(str(base['torch']))} → {md(str(cand['torch']))}")
    where.append(f"decided {md(_when(str(decision['generated_at'])))}")
    url = run_url or source.get("run_url")
    if url:
        where.append(_link("run", str(url)))
    policy = decision["policy"]
    runs = (
        f"baseline {md(_short(str(base['label'])))} (run {md(str(base['run_id']))}) vs candidate "
        f"{md(_short(str(cand['label'])))} (run {md(str(cand['run_id']))}) · policy profile "
        f"{md(policy['profile'])}, sha256 {md(policy['sha256'][:12])}"
    )
    # A backslash at the end of a line is a hard line break: three lines, one paragraph.
    blocks = [f"{title}\n{' · '.join(where)}\\\n{runs}"]
    if decision["reasons"]:
        blocks.append("\n".join(f"- {md(reason, 1000)}" for reason in decision["reasons"]))
    found = warnings(decision)
    if found:
        blocks.append("\n".join(["> [!WARNING]", *(f"> - {md(w)}" for w in found)]))
    return blocks


def _lane_tables(decision: DecisionRecord) -> list[tuple[str, list[str]]]:
    """The lane tables; the first carries the one-line legend above it."""
    gates = gate_names(decision)
    header = "\n".join(
        [
            table_line(["Row", "Lane", "Decision", *(md(g) for g in gates)]),
            table_line(["---"] * (3 + len(gates))),
        ]
    )
    tables: list[tuple[str, list[str]]] = []
    for lane, title in LANES:
        rows = [table_line(md(text) for text in row) for row in summary_rows(decision, lane, gates)]
        if rows:
            legend = "" if tables else f"_{md(LEGEND)}_\n\n"
            tables.append((f"### {title}\n\n{legend}{header}", rows))
    return tables


# Gates that neither passed nor failed in a cell that ran: listed, each with why.
_UNDECIDED = frozenset({"inconclusive", "untested"})


def _undecided_only(cell: Cell) -> bool:
    """A cell whose only verdicts needing attention leave gates open: inconclusive, or untested
    where the cell ran (a cell skipped on both sides is a backend absent here, told apart)."""
    if _one_side_only(cell):
        return False
    ran = not cell.get("baseline_status") == cell.get("candidate_status") == "skipped"
    found = {g["verdict"] for g in cell["gates"]} & (ATTENTION | (_UNDECIDED if ran else set()))
    return bool(found) and found <= _UNDECIDED


def _one_side_only(cell: Cell) -> bool:
    """A cell that one side ran and the other could not (a package its environment lacks): its
    status gate is untested, and its section says why in full."""
    ran = {cell.get("baseline_status"), cell.get("candidate_status")}
    return (
        "ok" in ran
        and len(ran) == 2
        and any(g["gate"] == "status" and g["verdict"] == "untested" for g in cell["gates"])
    )


def _attention_cells(decision: DecisionRecord) -> list[Cell]:
    """Cells that get a section: a verdict in ATTENTION other than inconclusive alone."""
    cells = [
        c
        for c in decision["cells"]
        if (any(g["verdict"] in ATTENTION for g in c["gates"]) or _one_side_only(c))
        and not _undecided_only(c)
    ]

    def key(cell: Cell) -> tuple[bool, int]:
        top = worst(g["verdict"] for g in cell["gates"])
        return cell["lane"] != "production", badness(top or "")

    # Most severe first (stable, so record order breaks ties): truncation drops from the
    # end, so what is lost first is the least important.
    return sorted(cells, key=key)


def _undecided_tail(gate: GateRecord) -> str:
    """What a reader needs to judge an undecided gate: its spread, rounds and cause."""
    texts = []
    if (spread := gate.get("spread")) is not None:
        texts.append(f"spread {spread * 100:.1f}%")
    if gate.get("rounds") is not None:
        texts.append(f"{gate['rounds']} round{'' if gate['rounds'] == 1 else 's'}")
    why = gate.get("undecided")
    if why is not None:
        texts.append(UNDECIDED_WHY.get(why, str(why)))
    if gate.get("needed_rounds") is not None:
        texts.append(f"≈{gate['needed_rounds']} rounds needed")
    return ", ".join(texts) or cap(gate["message"], _MESSAGE_LIMIT)


def _holds(cell: Cell) -> str | None:
    """The worst decision short of adopt that the cell's undecided gates led to, if any."""
    held = [
        g["decision"]
        for g in cell["gates"]
        if g["verdict"] in _UNDECIDED and g.get("decision") not in (None, "adopt")
    ]
    return max(held, key=DECISIONS.index) if held else None


def _undecided_entry(cell: Cell) -> str:
    # Gates with the same spread, rounds and cause (p50 and throughput come from the same
    # rounds) share one parenthesis.
    groups: dict[str, list[str]] = {}
    for gate in cell["gates"]:
        if gate["verdict"] == "inconclusive":
            change = "" if gate.get("change") is None else " " + format_change(gate["change"])
            groups.setdefault(_undecided_tail(gate), []).append(gate["gate"] + change)
        elif gate["verdict"] == "untested":
            tail = "untested: " + cap(gate["message"], _MESSAGE_LIMIT)
            groups.setdefault(tail, []).append(gate["gate"])
    text = "; ".join(f"{', '.join(names)} ({tail})" for tail, names in groups.items())
    held = _holds(cell)
    return f"- {md(cell['cell_id'])}: {md(text + (f' → {held}' if held else ''))}"


def _undecided_block(decision: DecisionRecord) -> str | None:
    cells = [c for c in decision["cells"] if _undecided_only(c)]
    if not cells:
        return None
    # Cells that hold the decision back first (a required gate left undecided), then
    # production before prototype; record order otherwise.
    cells.sort(key=lambda c: (_holds(c) is None, c["lane"] != "production"))
    lines = [_undecided_entry(c) for c in cells[:_UNDECIDED_LISTED]]
    if len(cells) > _UNDECIDED_LISTED:
        lines.append(f"- and {len(cells) - _UNDECIDED_LISTED} more")
    title = (
        f"**Undecided, {len(cells)} cell{'' if len(cells) == 1 else 's'}** — "
        "inconclusive or untested are their only verdicts needing attention:"
    )
    return title + "\n\n" + "\n".join(lines)


def _note(
    parts: _Parts, rows_kept: int, sections_kept: int, undecided: bool, url: str | None
) -> str:
    cut_sections = len(parts.sections) - sections_kept
    cut_rows = parts.row_count - rows_kept
    cut_list = "the list of undecided cells, " if parts.undecided and not undecided else ""
    text = (
        f"_Truncated to fit: {cut_list}{cut_sections} of {len(parts.sections)} cell sections "
        f"and {cut_rows} of {parts.row_count} table rows were cut."
    )
    if url:
        text += f" [Full report]({quote(url, safe=_URL_SAFE)})"
    return text + "_"


def _assemble(
    parts: _Parts, rows_kept: int, sections_kept: int, undecided: bool, url: str | None
) -> str:
    blocks = list(parts.head)
    left = rows_kept
    for title, rows in parts.tables:
        kept = rows[:left]
        left -= len(kept)
        if kept:
            blocks.append(title + "\n" + "\n".join(kept))
    if parts.absent:
        blocks.append(parts.absent)
    if parts.scaling:
        blocks.append(parts.scaling)
    listed = parts.undecided if undecided else None
    if sections_kept or listed:
        blocks.append(_SECTIONS_TITLE)
    blocks += parts.sections[:sections_kept]
    if listed:
        blocks.append(listed)
    if (
        rows_kept < parts.row_count
        or sections_kept < len(parts.sections)
        or (parts.undecided and not undecided)
    ):
        blocks.append(_note(parts, rows_kept, sections_kept, undecided, url))
    return "\n\n".join(blocks) + "\n"


def _largest(high: int, fits: Callable[[int], bool]) -> int | None:
    """The largest k in [0, high] with fits(k), assuming fits is monotone; None if none."""
    if high < 0 or not fits(0):
        return None
    lo, hi = 0, high
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo


def render_markdown(
    decision: DecisionRecord,
    *,
    max_chars: int | None = None,
    full_report_url: str | None = None,
    max_bytes: int | None = None,
) -> str:
    """The report; with max_chars (a comment's limit, in characters) or max_bytes (a job
    summary's, in UTF-8 bytes), the undecided list, whole sections and then whole rows are cut
    to fit it."""
    if max_bytes is not None:
        return _fit(decision, max_bytes, full_report_url, lambda t: len(t.encode("utf-8")))
    return _fit(decision, max_chars, full_report_url, len)


def _fit(
    decision: DecisionRecord,
    limit: int | None,
    full_report_url: str | None,
    measure: Callable[[str], int],
) -> str:
    max_chars = limit
    absent = absent_text(decision)
    parts = _Parts(
        head=_head(decision, full_report_url),
        tables=_lane_tables(decision),
        absent=None if absent is None else md(absent, None),
        sections=[cell_section(cell, full_report_url) for cell in _attention_cells(decision)],
        undecided=_undecided_block(decision),
        scaling=scaling_table(decision),
    )
    rows, sections = parts.row_count, len(parts.sections)
    full = _assemble(parts, rows, sections, True, full_report_url)
    if max_chars is None or measure(full) <= max_chars:
        return full

    def size(r: int, s: int) -> int:
        return measure(_assemble(parts, r, s, False, full_report_url))

    # The undecided list goes first, then sections, then rows: the tables are the summary a
    # reader needs first. Binary search keeps this O(n log n) for thousands of cells.
    # Without an undecided list to drop, keeping every section is the full text: too long.
    high = sections if parts.undecided else sections - 1
    kept = _largest(high, lambda s: size(rows, s) <= max_chars)
    if kept is not None:
        return _assemble(parts, rows, kept, False, full_report_url)
    kept = _largest(rows - 1, lambda r: size(r, 0) <= max_chars)
    if kept is not None:
        return _assemble(parts, kept, 0, False, full_report_url)
    # Even the heading does not fit: cut it by characters, keeping the note whole if possible.
    note = _note(parts, 0, 0, False, full_report_url)
    room = max_chars - measure(note) - 3  # "\n\n" before the note, "\n" after it
    if room > 0:
        return cap("\n\n".join(parts.head), room) + "\n\n" + note + "\n"
    return cap(note, max_chars - 1) + "\n" if max_chars > 0 else ""
