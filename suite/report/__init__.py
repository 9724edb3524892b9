"""Report registry: one decision record in, text in the asked-for format out.

Renderers only turn a decision record (kind "torch-matrix/decision") into text; the gate
logic that produced it lives elsewhere. Every format ends with a newline. A format is one
`register_format` call: the CLI's `--format` choices and the README's table of formats are
read from here.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from suite.core.decision_records import DecisionRecord
from suite.core.errors import InputError
from suite.core.results import atomic_write_json
from suite.report.chart import write_chart
from suite.report.junit import render_junit
from suite.report.markdown import render_markdown
from suite.report.table import render_table

__all__ = [
    "format_names",
    "format_summary",
    "register_format",
    "render",
    "render_json",
    "render_junit",
    "render_markdown",
    "render_table",
    "unregister_format",
    "write_chart",
    "write_reports",
]

Renderer = Callable[[DecisionRecord], str]


def render_json(decision: DecisionRecord) -> str:
    # Sorted keys: the same record always gives the same bytes, so reports diff cleanly.
    return json.dumps(decision, indent=2, sort_keys=True) + "\n"


_RENDERERS: dict[str, tuple[Renderer, str]] = {}


def register_format(name: str, renderer: Renderer, summary: str) -> None:
    """Add a report format; `summary` is its line in the README's table."""
    if name in _RENDERERS:
        raise ValueError(f"report format {name!r} is registered already")
    _RENDERERS[name] = (renderer, summary)


def unregister_format(name: str) -> None:
    del _RENDERERS[name]


def format_names() -> tuple[str, ...]:
    return tuple(_RENDERERS)


def format_summary(name: str) -> str:
    return _RENDERERS[name][1]


def render(decision: DecisionRecord, fmt: str) -> str:
    """Render the decision record in one of the registered formats."""
    try:
        renderer, _ = _RENDERERS[fmt]
    except KeyError:
        raise InputError(
            f"unknown report format {fmt!r}; expected one of {', '.join(format_names())}"
        ) from None
    return renderer(decision)


register_format("table", render_table, "the gate table for a terminal, one table per lane")
register_format(
    "markdown", render_markdown, "GitHub-flavoured Markdown: the PR comment and job summary"
)
register_format("json", render_json, "the decision record itself, keys sorted")
register_format("junit", render_junit, "JUnit XML: a test case per cell and gate, for CI UIs")


def write_reports(decision: DecisionRecord, out: Path) -> None:
    """The files every decision folder gets: the record, its Markdown and JUnit reports and
    the chart."""
    atomic_write_json(out / "decision.json", decision)
    (out / "decision.md").write_text(render(decision, "markdown"), encoding="utf-8")
    (out / "junit.xml").write_text(render(decision, "junit"), encoding="utf-8")
    write_chart(decision, out / "chart.png")
