"""The comment and the decision reports as GitHub shows them: every golden file rendered by
cmark-gfm (GitHub's Markdown, with its table extension and the raw HTML GitHub keeps), then read
as a reader would. An escape that shows, a table row whose cells slide, a <details> block whose
contents stay raw Markdown, or a headline that is not the decision would pass the golden
comparison (the golden holds whatever the renderer wrote) and still read wrong. Each check is
shown to catch a planted case."""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path

import pytest

from tests.helpers import REPO

GOLDEN = sorted((REPO / "tests" / "golden").glob("*.md"))
DECISIONS = ("ADOPT", "ISOLATE", "DEFER", "ROLLBACK")
ESCAPE = re.compile(r"\\[!-/:-@\[-`{-~]")  # a backslash before ASCII punctuation


def render(markdown: str) -> str:
    cmark = shutil.which("cmark-gfm")
    if cmark is None:
        pytest.skip("needs cmark-gfm (apt-get install cmark-gfm)")
    proc = subprocess.run(
        [cmark, "--extension", "table", "--extension", "autolink", "--unsafe"],
        input=markdown, capture_output=True, text=True, check=True, timeout=30,
    )  # fmt: skip
    return proc.stdout


@dataclass
class Page(HTMLParser):
    """What a reader sees: the text outside code, the tables' rows, each <details> block."""

    prose: list[str] = field(default_factory=list)
    spans: list[str] = field(default_factory=list)  # inline code, outside <pre>
    rows: list[list[str]] = field(default_factory=list)  # per table, cells per row
    tables: list[list[int]] = field(default_factory=list)
    details: list[list[str]] = field(default_factory=list)  # the tags inside each block
    headings: list[str] = field(default_factory=list)
    _code: int = 0
    _pre: int = 0
    _in_details: int = 0
    _heading: list[str] | None = None

    def __post_init__(self) -> None:
        super().__init__(convert_charrefs=True)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in ("pre", "code"):
            self._code += 1
            self._pre += tag == "pre"
            if tag == "code" and not self._pre:
                self.spans.append("")
        elif tag == "table":
            self.tables.append([])
        elif tag == "tr":
            self.tables[-1].append(0)
        elif tag in ("td", "th"):
            self.tables[-1][-1] += 1
        elif tag == "details":
            self._in_details += 1
            self.details.append([])
        elif tag in ("h1", "h2", "h3"):
            self._heading = []
        if self._in_details and tag != "details":
            self.details[-1].append(tag)

    def handle_endtag(self, tag: str) -> None:
        if tag in ("pre", "code"):
            self._code -= 1
            self._pre -= tag == "pre"
        elif tag == "details":
            self._in_details -= 1
        elif tag in ("h1", "h2", "h3") and self._heading is not None:
            self.headings.append("".join(self._heading))
            self._heading = None

    def handle_data(self, data: str) -> None:
        if self._heading is not None:
            self._heading.append(data)
        if not self._code:
            self.prose.append(data)
        elif not self._pre:
            self.spans[-1] += data


def read(markdown: str) -> Page:
    page = Page()
    page.feed(render(markdown))
    page.close()
    return page


def problems(markdown: str) -> list[str]:
    """What reads wrong once rendered."""
    page = read(markdown)
    found = []
    prose = "".join(page.prose)
    for leftover in ("\\", "**", "```", "<details", "<summary", "| --- |"):
        if leftover in prose:
            at = prose.index(leftover)
            found.append(f"{leftover!r} shows as text: …{prose[max(0, at - 40) : at + 40]}…")
    # Inside code a Markdown escape is not one: it shows.
    for span in page.spans:
        if ESCAPE.search(span):
            found.append(f"an escape shows in code: {span}")
    for number, table in enumerate(page.tables):
        header = table[0]
        if any(cells != header for cells in table[1:]):
            found.append(f"table {number}: rows of {sorted(set(table))} cells")
    # GitHub keeps a row's extra cells out of sight: count them in the source.
    for line in markdown.splitlines():
        if line.startswith("| ") and line.endswith(" |"):
            cells = len(re.split(r"(?<!\\)\|", line)) - 2
            header = _header_of(markdown, line)
            if cells != header:
                found.append(f"a row of {cells} cells under a header of {header}: {line[:60]}")
    for number, tags in enumerate(page.details):
        if "summary" not in tags or not {"table", "pre", "p", "ul"} & set(tags):
            found.append(f"details block {number} has no rendered contents: {tags}")
    return found


def _header_of(markdown: str, row: str) -> int:
    lines = markdown.splitlines()
    at = lines.index(row)
    while at > 0 and lines[at - 1].startswith("| "):
        at -= 1
    return len(re.split(r"(?<!\\)\|", lines[at])) - 2


@pytest.mark.parametrize("golden", GOLDEN, ids=[p.name for p in GOLDEN])
def test_each_golden_renders_as_a_reader_expects(golden: Path) -> None:
    markdown = golden.read_text(encoding="utf-8")
    assert problems(markdown) == []
    page = read(markdown)
    # The headline is the decision, in bold, before anything else a reader sees.
    first = page.headings[0]
    assert first.startswith("torch-matrix: ") and first.split()[1] in DECISIONS, first
    assert "<strong>" in render(markdown.split("\n\n")[0] + "\n")


def test_the_comment_opens_with_the_commits_the_versions_the_time_and_the_run_link() -> None:
    html = render((REPO / "tests" / "golden" / "comment_pr-check.md").read_text())
    opening = html.split("</p>", 2)
    lines = opening[0].split("<br />")
    assert len(lines) == 2 and "<h2>" in html.split("<p>")[0]
    assert re.search(r"base <code>[0-9a-f]{10}</code> → head <code>[0-9a-f]{10}</code>", lines[0])
    assert "torch 2.13.0+cpu → 2.14.1+cu130" in lines[0] and "decided 2026-12-03" in lines[0]
    assert re.search(r'<a href="https://github\.com/[^"]+/actions/runs/\d+">run</a>', lines[0])
    assert "policy profile research" in lines[1]


@pytest.mark.parametrize(
    ("planted", "caught"),
    [
        ("A message with a name in code: `a\\_b`\n", "an escape shows in code: a\\_b"),
        ("| a | b |\n| --- | --- |\n| 1 | x|y |\n", "a row of 3 cells under a header of 2"),
        (
            "<details><summary>cell</summary>\n| a |\n| --- |\n| 1 |\n</details>\n",
            "details block 0 has no rendered contents",
        ),
        ("torch 2\\.13 **ADOPT **\n", "'**' shows as text"),
    ],
    ids=["escape-in-code", "unescaped-pipe", "details-without-blank-line", "broken-bold"],
)
def test_the_checks_catch_what_reads_wrong(planted: str, caught: str) -> None:
    assert any(caught in problem for problem in problems(planted)), problems(planted)
