"""GitHub Markdown report: decision, reasons, lane tables and per-cell detail sections.

Meant for a pull-request comment, so every value from the record goes through
suite.report.escape, and render_markdown can shrink the body to a comment size limit.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from suite.report.escape import cap, code_block, html_text, md
from suite.report.table import (
    ATTENTION,
    GOOD,
    LANES,
    NONE,
    VERDICT_ORDER,
    Decision,
    badness,
    format_change,
    format_ci,
    format_p,
    format_threshold,
    format_value,
    gate_names,
    side_text,
    summary_rows,
    warnings,
    worst,
)

_DETAIL_HEADERS = (
    "Gate",
    "Verdict",
    "Baseline",
    "Candidate",
    "Change",
    "CI",
    "p-value",
    "Threshold",
    "Message",
)
_SECTIONS_TITLE = "### Cells needing attention"
# Characters a link destination may keep; the rest (spaces, parentheses, angle brackets,
# backticks, non-ASCII) are percent-encoded so the URL cannot end the link early.
_URL_SAFE = ":/?#&=%+;,@!$'*~"


@dataclass(frozen=True)
class _Parts:
    head: list[str]
    # (title and header lines, body lines) per lane with rows
    tables: list[tuple[str, list[str]]]
    sections: list[str]

    @property
    def row_count(self) -> int:
        return sum(len(rows) for _, rows in self.tables)


def _table_line(cells: Iterable[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def _head(decision: Decision) -> list[str]:
    blocks = [f"## torch-matrix: **{md(str(decision['decision']).upper())}**"]
    if decision["reasons"]:
        blocks.append("\n".join(f"- {md(reason)}" for reason in decision["reasons"]))
    policy = decision["policy"]
    blocks.append(
        f"**Baseline** {md(side_text(decision['baseline']))} vs "
        f"**candidate** {md(side_text(decision['candidate']))} · "
        f"policy profile {md(policy['profile'])}, sha256 {md(policy['sha256'][:12])}"
    )
    found = warnings(decision)
    if found:
        blocks.append("\n".join(["> [!WARNING]", *(f"> - {md(w)}" for w in found)]))
    return blocks


def _lane_tables(decision: Decision) -> list[tuple[str, list[str]]]:
    gates = gate_names(decision)
    header = "\n".join(
        [
            _table_line(["Row", "Lane", "Decision", *(md(g) for g in gates)]),
            _table_line(["---"] * (3 + len(gates))),
        ]
    )
    tables: list[tuple[str, list[str]]] = []
    for lane, title in LANES:
        rows = [
            _table_line(md(text) for text in row) for row in summary_rows(decision, lane, gates)
        ]
        if rows:
            tables.append((f"### {title}\n\n{header}", rows))
    return tables


def _attention_cells(decision: Decision) -> list[dict[str, Any]]:
    cells = [c for c in decision["cells"] if any(g["verdict"] in ATTENTION for g in c["gates"])]

    def key(cell: dict[str, Any]) -> tuple[bool, int]:
        top = worst(g["verdict"] for g in cell["gates"])
        return cell["lane"] != "production", badness(top or "")

    # Most severe first (stable, so record order breaks ties): truncation drops from the
    # end, so what is lost first is the least important.
    return sorted(cells, key=key)


def _verdict_summary(cell: dict[str, Any]) -> str:
    groups = []
    for verdict in VERDICT_ORDER:
        names = [g["gate"] for g in cell["gates"] if g["verdict"] == verdict]
        if names and verdict not in GOOD:
            groups.append(f"{verdict}: {', '.join(names)}")
    return "; ".join(groups)


def _gate_line(gate: dict[str, Any]) -> str:
    name, unit = gate["gate"], gate.get("unit")
    texts = [
        name,
        gate["verdict"],
        format_value(gate.get("baseline"), unit, name),
        format_value(gate.get("candidate"), unit, name),
        format_change(gate.get("change")),
        format_ci(gate.get("ci")),
        format_p(gate.get("p_value")),
        format_threshold(gate.get("threshold")),
        gate["message"],
    ]
    return _table_line(md(text) for text in texts)


def _section(cell: dict[str, Any]) -> str:
    # <summary> sits in a raw HTML block, where only HTML escaping works.
    summary = f"{html_text(cell['cell_id'])} — {html_text(_verdict_summary(cell))}"
    status = (
        f"Status: baseline {md(cell['baseline_status'] or NONE)}, "
        f"candidate {md(cell['candidate_status'] or NONE)}"
    )
    table = [
        _table_line(_DETAIL_HEADERS),
        _table_line(["---"] * len(_DETAIL_HEADERS)),
        *(_gate_line(g) for g in cell["gates"]),
    ]
    # The blank line after <summary> ends the HTML block, so what follows is Markdown.
    parts = [f"<details><summary>{summary}</summary>", status, "\n".join(table)]
    repro = cell.get("repro") or {}
    if repro.get("command"):
        parts += ["Reproduce:", code_block(repro["command"], "sh")]
    if repro.get("docker"):
        parts += ["In the recorded image:", code_block(repro["docker"], "sh")]
    artifacts = cell.get("artifacts") or {}
    if artifacts:
        listing = [f"- {md(name)}: {md(path)}" for name, path in sorted(artifacts.items())]
        parts += ["Artifacts:", "\n".join(listing)]
    parts.append("</details>")
    return "\n\n".join(parts)


def _note(parts: _Parts, rows_kept: int, sections_kept: int, url: str | None) -> str:
    cut_sections = len(parts.sections) - sections_kept
    cut_rows = parts.row_count - rows_kept
    text = (
        f"_Truncated to fit: {cut_sections} of {len(parts.sections)} cell sections and "
        f"{cut_rows} of {parts.row_count} table rows were cut."
    )
    if url:
        text += f" [Full report]({quote(url, safe=_URL_SAFE)})"
    return text + "_"


def _assemble(parts: _Parts, rows_kept: int, sections_kept: int, url: str | None) -> str:
    blocks = list(parts.head)
    left = rows_kept
    for title, rows in parts.tables:
        kept = rows[:left]
        left -= len(kept)
        if kept:
            blocks.append(title + "\n" + "\n".join(kept))
    if sections_kept:
        blocks += [_SECTIONS_TITLE, *parts.sections[:sections_kept]]
    if rows_kept < parts.row_count or sections_kept < len(parts.sections):
        blocks.append(_note(parts, rows_kept, sections_kept, url))
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
    decision: Decision, *, max_chars: int | None = None, full_report_url: str | None = None
) -> str:
    """The report; with max_chars, whole sections and then whole rows are cut to fit it."""
    parts = _Parts(
        head=_head(decision),
        tables=_lane_tables(decision),
        sections=[_section(cell) for cell in _attention_cells(decision)],
    )
    rows, sections = parts.row_count, len(parts.sections)
    full = _assemble(parts, rows, sections, full_report_url)
    if max_chars is None or len(full) <= max_chars:
        return full

    def size(r: int, s: int) -> int:
        return len(_assemble(parts, r, s, full_report_url))

    # Sections are dropped before rows: the tables are the summary a reader needs first.
    # Binary search keeps this O(n log n) for matrices with thousands of cells.
    kept = _largest(sections - 1, lambda s: size(rows, s) <= max_chars)
    if kept is not None:
        return _assemble(parts, rows, kept, full_report_url)
    kept = _largest(rows - 1, lambda r: size(r, 0) <= max_chars)
    if kept is not None:
        return _assemble(parts, kept, 0, full_report_url)
    # Even the heading does not fit: cut it by characters, keeping the note whole if possible.
    note = _note(parts, 0, 0, full_report_url)
    room = max_chars - len(note) - 3  # "\n\n" before the note, "\n" after it
    if room > 0:
        return cap("\n\n".join(parts.head), room) + "\n\n" + note + "\n"
    return cap(note, max_chars - 1) + "\n" if max_chars > 0 else ""
