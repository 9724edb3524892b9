"""Report registry: one decision record in, text in the asked-for format out.

Renderers only turn a decision record (kind "torch-matrix/decision") into text; the gate
logic that produced it lives elsewhere. Every format ends with a newline.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from suite.core.errors import InputError
from suite.core.results import atomic_write_json
from suite.report.chart import write_chart
from suite.report.junit import render_junit
from suite.report.markdown import render_markdown
from suite.report.table import render_table

__all__ = [
    "FORMATS",
    "render",
    "render_json",
    "render_junit",
    "render_markdown",
    "render_table",
    "write_chart",
    "write_reports",
]

FORMATS = ("table", "markdown", "json", "junit")


def render_json(decision: dict[str, Any]) -> str:
    # Sorted keys: the same record always gives the same bytes, so reports diff cleanly.
    return json.dumps(decision, indent=2, sort_keys=True) + "\n"


_RENDERERS: dict[str, Callable[[dict[str, Any]], str]] = {
    "table": render_table,
    "markdown": render_markdown,
    "json": render_json,
    "junit": render_junit,
}


def render(decision: dict[str, Any], fmt: str) -> str:
    """Render the decision record in one of FORMATS."""
    try:
        renderer = _RENDERERS[fmt]
    except KeyError:
        raise InputError(
            f"unknown report format {fmt!r}; expected one of {', '.join(FORMATS)}"
        ) from None
    return renderer(decision)


def write_reports(decision: dict[str, Any], out: Path) -> None:
    """The files every decision folder gets: the record, its Markdown and JUnit reports and
    the chart."""
    atomic_write_json(out / "decision.json", decision)
    (out / "decision.md").write_text(render(decision, "markdown"), encoding="utf-8")
    (out / "junit.xml").write_text(render(decision, "junit"), encoding="utf-8")
    write_chart(decision, out / "chart.png")
