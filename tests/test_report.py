"""Report renderers: golden Markdown, escaping of hostile values, truncation, JUnit, table, chart.

The decision records are built here and checked against the decision schema, so the
fixtures cannot drift from what the gate logic is allowed to write.

Golden files live in tests/golden/. After an intended change to the Markdown output,
regenerate them with

    UPDATE_GOLDEN=1 python3 -m pytest tests/test_report.py

and read the diff before committing it.
"""

from __future__ import annotations

import copy
import json
import os
import re
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from suite.core.errors import InputError
from suite.core.validation import validate
from suite.report import (
    format_names,
    render,
    render_junit,
    render_markdown,
    render_table,
    write_chart,
)
from suite.report.escape import ZWJ, code_block, html_text, md
from suite.report.table import format_bytes, format_seconds, format_value
from tests.helpers import TESTS
from tests.synthetic import research_decision

GOLDEN = TESTS / "golden"
SHA = "0123456789abcdef" * 4
URL = "https://ci.example/runs/42/report.md"
HOSTILE = "evil<img src=x onerror=alert(1)>@octocat</details>| pipe |```x"


def gate(name: str, verdict: str, severity: str, message: str, **extra: Any) -> dict[str, Any]:
    return {"gate": name, "verdict": verdict, "severity": severity, "message": message, **extra}


def latency(name: str, verdict: str, base: float, cand: float, **extra: Any) -> dict[str, Any]:
    change = cand / base - 1
    return gate(
        name,
        verdict,
        "soft",
        extra.pop("message", f"{name} changed {change:+.1%}"),
        unit="s",
        baseline=base,
        candidate=cand,
        change=change,
        ci=extra.pop("ci", [change - 0.02, change + 0.02]),
        p_value=extra.pop("p_value", 0.001),
        threshold=0.05,
        **extra,
    )


def cell(cell_id: str, lane: str, gates: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    case, backend = cell_id.rsplit("@", 1)
    workload = case.split(".", 1)[0]
    doc = {
        "cell_id": cell_id,
        "row_id": f"{workload}@{backend}",
        "workload": workload,
        "backend": backend,
        "lane": lane,
        "baseline_status": "ok",
        "candidate_status": "ok",
        "gates": gates,
    }
    doc.update(extra)
    return doc


def row(row_id: str, lane: str, decision: str, reasons: list[str]) -> dict[str, Any]:
    workload, backend = row_id.rsplit("@", 1)
    return {
        "row_id": row_id,
        "workload": workload,
        "backend": backend,
        "lane": lane,
        "fleet": backend in ("cuda", "cpu"),
        "decision": decision,
        "reasons": reasons,
    }


def record(decision: str, reasons: list[str], rows: list[Any], cells: list[Any]) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "kind": "torch-matrix/decision",
        "schema_version": 1,
        "decision": decision,
        "reasons": reasons,
        "generated_at": "2025-01-02T03:04:05.000Z",
        "matrix": None,
        "policy": {"file": "policy.yaml", "sha256": SHA, "profile": "inference-service"},
        "baseline": {
            "label": "stable",
            "run_id": "20250101T000000Z-aaaaaa",
            "torch": "2.5.1",
            "dir": "runs/base",
        },
        "candidate": {
            "label": "candidate",
            "run_id": "20250102T000000Z-bbbbbb",
            "torch": "2.6.0",
            "dir": "runs/cand",
        },
        "comparable": {"ok": True, "differences": []},
        "rows": rows,
        "cells": cells,
    }
    validate(doc, "torch-matrix/decision", file="<test>")
    return doc


def ok_gates(p50: tuple[float, float], mem: tuple[int, int]) -> list[dict[str, Any]]:
    return [
        gate("status", "pass", "hard", "ok on both sides", required=True),
        gate("correctness", "pass", "hard", "rmse within 2.0x reference", required=True),
        latency(
            "latency_p50", "pass" if p50[1] >= p50[0] * 0.95 else "improved", *p50, p_value=0.4
        ),
        gate(
            "peak_memory",
            "pass",
            "soft",
            "within 10%",
            unit="bytes",
            baseline=mem[0],
            candidate=mem[1],
            change=mem[1] / mem[0] - 1,
            threshold=0.1,
        ),
    ]


def adopt_record() -> dict[str, Any]:
    rows = [row("sdpa@cuda", "production", "adopt", []), row("sdpa@cpu", "production", "adopt", [])]
    cells = [
        cell(
            "sdpa.fp16.1024@cuda",
            "production",
            ok_gates((0.00123, 0.00101), (512 * 2**20, 512 * 2**20)),
        ),
        cell(
            "sdpa.fp16.4096@cuda", "production", ok_gates((0.0155, 0.0154), (3 * 2**30, 3 * 2**30))
        ),
        cell(
            "sdpa.fp32.1024@cpu",
            "production",
            ok_gates((0.000456, 0.000455), (64 * 2**20, 64 * 2**20)),
        ),
    ]
    return record("adopt", ["every gate passed on every fleet backend"], rows, cells)


def rollback_record() -> dict[str, Any]:
    rows = [
        row(
            "sdpa@cuda",
            "production",
            "rollback",
            ["a hard gate failed on a backend the fleet depends on"],
        ),
        row("sdpa@cpu", "production", "adopt", []),
        row(
            "linear_cross_entropy@cuda",
            "production",
            "defer",
            ["a performance gate regressed beyond its threshold"],
        ),
        row(
            "flex_attention@cuda",
            "prototype",
            "isolate",
            ["a hard gate failed on a backend the fleet depends on"],
        ),
    ]
    crashed = cell(
        "sdpa.fp16.4096@cuda",
        "production",
        [
            gate(
                "status",
                "new-failure",
                "hard",
                "candidate crashed: SIGSEGV in aten::_efficient_attention_forward",
                required=True,
            ),
            gate("correctness", "untested", "hard", "no candidate output", required=True),
            gate(
                "latency_p50", "untested", "soft", "no candidate samples", unit="s", baseline=0.0155
            ),
        ],
        candidate_status="crashed",
        repro={
            # as cell_argv (suite/flows/repro.py) writes it for a venv side, pasted in the results
            "command": (
                'torch-matrix run --matrix "$PWD"/candidate/inputs/matrix.yaml --cell sdpa.fp16.4096@cuda --size smoke --python /opt/venv/bin/python --out "$PWD"/candidate/repro/sdpa.fp16.4096@cuda/"$(date -u +%Y%m%dT%H%M%SZ)"'
            ),
            "docker": None,
        },
    )
    wrong = cell(
        "sdpa.fp16.1024@cuda",
        "production",
        [
            gate("status", "pass", "hard", "ok on both sides", required=True),
            gate(
                "correctness", "fail", "hard", "rmse 3.1e-3 > 3.0 x reference 8.0e-4", required=True
            ),
            latency("latency_p50", "pass", 0.00123, 0.00125, p_value=0.31),
            latency(
                "latency_p95",
                "inconclusive",
                0.0015,
                0.0017,
                ci=[-0.04, 0.31],
                p_value=0.09,
                message="noisy: relative IQR 0.21",
            ),
        ],
        repro={
            "command": (
                'torch-matrix run --matrix "$PWD"/candidate/inputs/matrix.yaml --cell sdpa.fp16.1024@cuda --size smoke --python /opt/venv/bin/python --out "$PWD"/candidate/repro/sdpa.fp16.1024@cuda/"$(date -u +%Y%m%dT%H%M%SZ)"'
            ),
            "docker": None,
        },
    )
    slow = cell(
        "linear_cross_entropy.bf16.8192@cuda",
        "production",
        [
            gate("status", "pass", "hard", "ok on both sides", required=True),
            latency("latency_p50", "fail", 0.0042, 0.0047),
            gate(
                "throughput",
                "fail",
                "soft",
                "throughput fell 10.6%",
                unit="tokens/s",
                baseline=1.95e6,
                candidate=1.743e6,
                change=-0.106,
                ci=[-0.13, -0.08],
                p_value=0.0004,
                threshold=0.05,
            ),
            gate(
                "peak_memory",
                "pass",
                "soft",
                "within 10%",
                unit="bytes",
                baseline=2_469_396_480,
                candidate=2_474_639_360,
                change=0.0021,
                threshold=0.1,
            ),
        ],
        artifacts={
            "trace_baseline": "runs/base/traces/linear_cross_entropy.bf16.8192@cuda.json",
            "trace_candidate": "runs/cand/traces/linear_cross_entropy.bf16.8192@cuda.json",
        },
    )
    cpu = cell(
        "sdpa.fp32.1024@cpu", "production", ok_gates((0.000456, 0.000455), (64 * 2**20, 64 * 2**20))
    )
    proto = cell(
        "flex_attention.bf16.2048@cuda",
        "prototype",
        [
            gate(
                "status",
                "new-failure",
                "hard",
                "torch._dynamo.exc.Unsupported: call_function in skip_files",
                required=True,
            ),
            gate(
                "compile_time",
                "not-comparable",
                "info",
                "no candidate compile",
                unit="s",
                baseline=12.5,
            ),
        ],
        candidate_status="failed",
    )
    doc = record(
        "rollback",
        [
            "a hard gate failed on a backend the fleet depends on",
            "a performance gate regressed beyond its threshold",
        ],
        rows,
        [crashed, wrong, slow, cpu, proto],
    )
    doc["policy"]["mismatches"] = ["20250102T000000Z-bbbbbb was captured under policy fedcba987654"]
    doc["comparable"] = {
        "ok": False,
        "differences": [
            {"field": "environment.cuda_driver", "baseline": "550.54", "candidate": "560.28"}
        ],
    }
    validate(doc, "torch-matrix/decision", file="<test>")
    return doc


def hostile_record() -> dict[str, Any]:
    """The rollback record with attacker-controlled text in names, ids, messages and commands."""
    doc = rollback_record()
    doc["reasons"].append(HOSTILE + "\n\n# heading")
    doc["rows"][0]["row_id"] = HOSTILE + "@cuda"
    for c in doc["cells"]:
        if c["row_id"] == "sdpa@cuda":
            c["row_id"] = HOSTILE + "@cuda"
            c["cell_id"] = HOSTILE + c["cell_id"]
            c["gates"][0]["message"] = f"{HOSTILE}\n\n</details>\n<script>x</script>\x1b[2J\x00"
            c["repro"]["command"] = f"run '{HOSTILE}'\n````\n</details>"
    doc["cells"][0]["gates"].append(gate("pwn|<b>", "fail", "hard", "`code` **bold**"))
    validate(doc, "torch-matrix/decision", file="<test>")
    return doc


def outside_code(text: str) -> str:
    """The Markdown with fenced code blocks removed, as CommonMark would close them."""
    kept: list[str] = []
    fence: str | None = None
    for line in text.split("\n"):
        if fence is None:
            opened = re.match(r"^ {0,3}(`{3,})", line)
            if opened:
                fence = opened.group(1)
            else:
                kept.append(line)
        elif re.fullmatch(rf" {{0,3}}`{{{len(fence)},}}\s*", line):
            fence = None
    assert fence is None, "a fenced block was never closed"
    return "\n".join(kept)


def assert_tables_intact(text: str) -> int:
    """Every table keeps one column count; returns how many table lines there are."""
    lines = 0
    for block in re.split(r"\n(?!\|)", text):
        table = [line for line in block.split("\n") if line.startswith("|")]
        widths = {len(re.findall(r"(?<!\\)\|", line)) for line in table}
        assert len(widths) <= 1, table
        lines += len(table)
    return lines


def research_record() -> dict[str, Any]:
    """The research-profile A/B on a CPU runner, with a fixed policy hash for the golden."""
    doc = research_decision()
    doc["policy"]["sha256"] = SHA
    return doc


RECORDS = {"rollback": rollback_record, "adopt": adopt_record, "research": research_record}


@pytest.mark.parametrize("name", list(RECORDS))
def test_markdown_matches_golden(name: str) -> None:
    text = render_markdown(RECORDS[name]())
    path = GOLDEN / f"decision_{name}.md"
    if os.environ.get("UPDATE_GOLDEN") == "1" and text != path.read_text(encoding="utf-8"):
        path.parent.mkdir(exist_ok=True)
        path.write_text(text, encoding="utf-8")
        # Never a pass that compares a file with itself: the update is for a person to review.
        pytest.fail(f"{path} rewritten; review the diff, then rerun without UPDATE_GOLDEN")
    assert text == path.read_text(encoding="utf-8")


def test_markdown_structure() -> None:
    text = render_markdown(rollback_record())
    assert text.startswith("## torch-matrix: **ROLLBACK**\n")
    assert "### Production lane" in text and "### Prototype lane" in text
    # Four cells have a fail, new-failure, inconclusive or not-comparable verdict; the CPU one does not.
    assert text.count("<details>") == text.count("</details>") == 4
    assert "sdpa\\.fp32\\.1024@" not in text.split("### Cells needing attention")[1]
    # sdpa@cuda: worst verdict per gate, with a count where its two cells disagree
    assert (
        "| sdpa@cuda | production | rollback | new\\-failure \\(hard, 1/2\\) | fail \\(hard, 1/2\\) "
        "| untested \\(soft, 1/2\\) | inconclusive \\(soft\\) | — |" in text
    )
    assert "1\\.23 ms" in text and "2\\.30 GiB" in text and "\\+11\\.9%" in text
    assert (
        '```sh\ntorch-matrix run --matrix "$PWD"/candidate/inputs/matrix.yaml --cell sdpa' in text
    )
    assert "> [!WARNING]" in text and "environment\\.cuda\\_driver" in text
    attention = [c for c in rollback_record()["cells"] if c["cell_id"] != "sdpa.fp32.1024@cpu"]
    # lane tables (header, rule, rows) + one gate table per attention cell
    assert assert_tables_intact(text) == (2 + 3) + (2 + 1) + sum(
        2 + len(c["gates"]) for c in attention
    )


def table_rows(text: str) -> list[str]:
    """The first column of every lane-table body row."""
    return [
        line.split(" | ")[0].removeprefix("| ")
        for line in text.split("### Cells needing attention")[0].split("\n")
        if line.startswith("| ") and not line.startswith(("| Row ", "| Gate ", "| ---"))
    ]


def test_absent_backend_rows_collapse_into_one_line() -> None:
    doc = research_record()
    text = render_markdown(doc)
    absent = [r["row_id"] for r in doc["rows"] if r["backend"] in ("cuda", "rocm", "mps")]
    assert len(doc["rows"]) == 17 and len(absent) == 12
    rows = table_rows(text)
    assert rows == [
        "flex\\_attention@cpu",
        "sdpa@cpu",
        "linear\\_cross\\_entropy@cpu",
        "mlp\\_train@cpu",
        "rollback@any",
    ]
    assert not any("cuda" in r or "rocm" in r or "mps" in r for r in rows)
    line = next(x for x in text.split("\n") if x.startswith("No evidence on "))
    assert line == (
        "No evidence on cuda, rocm, mps \\(every cell skipped on both sides — cuda: torch "
        "2\\.13\\.0\\+cpu is not a CUDA build; rocm: torch 2\\.13\\.0\\+cpu is not a ROCm \\(HIP\\) "
        "build; mps: torch 2\\.13\\.0\\+cpu was built without MPS\\): 12 rows left out "
        "of the tables — flex\\_attention, sdpa, linear\\_cross\\_entropy, mlp\\_train on each"
    )
    # The tables and the line are the only places rows are named: no section for them either.
    assert "@cuda" not in text and "@mps" not in text


def test_absent_rows_on_different_backends_are_grouped() -> None:
    doc = research_record()
    # sdpa ran on cuda this time: its cuda row has evidence and keeps its table row.
    for c in doc["cells"]:
        if c["row_id"] == "sdpa@cuda":
            c["baseline_status"] = "ok"
    text = render_markdown(doc)
    assert "sdpa@cuda" in table_rows(text)
    assert (
        "11 rows left out of the tables — flex\\_attention, linear\\_cross\\_entropy, "
        "mlp\\_train on cuda, rocm, mps; sdpa on rocm, mps"
    ) in text


def test_inconclusive_only_cells_are_listed_not_sectioned() -> None:
    doc = research_record()
    text = render_markdown(doc)
    summaries = re.findall(r"<details><summary>(\S+) ", text)
    # The one cell with a fail keeps its section; its inconclusive gates are shown there.
    assert summaries == ["flex_attention.causal.compiled.bf16@cpu"]
    assert "fail: latency_p95; inconclusive: latency_p50, throughput" in text
    undecided = text.split("**Undecided, 5 cells**")[1]
    assert "<details>" not in undecided
    entries = [line for line in undecided.split("\n") if line.startswith("- ")]
    assert entries[0] == (
        "- flex\\_attention\\.document@cpu: latency\\_p50 \\+6\\.1%, latency\\_p95 \\+7\\.9%, "
        "throughput \\-6\\.1% \\(spread 9\\.2%, 20 rounds, too noisy, ≈58 rounds needed\\)"
    )
    assert entries[-1] == (
        "- mlp\\_train\\.default@cpu: latency\\_p50 \\-0\\.8%, latency\\_p95 \\-1\\.0%, "
        "throughput \\+0\\.8% \\(spread 6\\.4%, 9 rounds, out of time, ≈24 rounds needed\\)"
    )
    # Inconclusive, or untested in a cell that ran: every such cell is listed with why.
    only_undecided = [
        c["cell_id"]
        for c in doc["cells"]
        if {g["verdict"] for g in c["gates"]} & {"fail", "new-failure", "not-comparable"} == set()
        and any(g["verdict"] in ("inconclusive", "untested") for g in c["gates"])
        and not c["baseline_status"] == c["candidate_status"] == "skipped"
    ]
    assert len(entries) == len(only_undecided) == 5
    for cell_id, entry in zip(only_undecided, entries, strict=True):
        assert entry.startswith(f"- {md(cell_id)}: ")
    untested = next(e for e in entries if "fwd\\_bwd" in e)
    assert "untested: no steady\\-state timing on both sides" in untested


def test_undecided_list_is_capped_and_names_what_holds_the_decision() -> None:
    doc = research_record()
    template = next(c for c in doc["cells"] if c["cell_id"] == "mlp_train.default@cpu")
    for i in range(12):
        extra = copy.deepcopy(template)
        extra["cell_id"] = f"mlp_train.extra{i}@cpu"
        doc["cells"].append(extra)
    template["gates"][2]["decision"] = "defer"  # as when latency evidence is required
    text = render_markdown(doc)
    entries = [line for line in text.split("**Undecided, 17 cells**")[1].split("\n") if line]
    assert entries[1].startswith("- mlp\\_train\\.default@cpu:") and entries[1].endswith(" → defer")
    assert len(entries) == 1 + 10 + 1 and entries[-1] == "- and 7 more"


def test_old_records_without_rounds_fall_back_to_the_message() -> None:
    doc = research_record()
    for c in doc["cells"]:
        for g in c["gates"]:
            for key in ("rounds", "spread", "needed_rounds", "undecided"):
                g.pop(key, None)
    text = render_markdown(doc)
    assert (
        "- mlp\\_train\\.default@cpu: latency\\_p50 \\-0\\.8% \\(p50 \\-0\\.8% \\(interval " in text
    )


def test_markdown_neutralises_hostile_values() -> None:
    text = render_markdown(hostile_record())
    prose = outside_code(text)
    assert "<img" not in prose and "<script" not in prose and "<b>" not in prose
    assert "@octocat" not in prose and f"@{ZWJ}octocat" in prose
    assert "\x1b" not in text and "\x00" not in text
    # No premature close: the only </details> outside code are the ones the renderer wrote.
    assert prose.count("<details>") == prose.count("</details>") == 4
    assert re.findall(r"</?details>", prose) == ["<details>", "</details>"] * 4
    assert "\n# heading" not in prose
    assert_tables_intact(prose)
    # The hostile row is still exactly one table row.
    assert len([line for line in prose.split("\n") if line.startswith("| evil")]) == 1


def test_escape_helpers() -> None:
    assert md("a_b*c") == "a\\_b\\*c"
    assert md("<x> & y") == "&lt;x&gt; &amp; y"
    assert md("hi @team") == f"hi @{ZWJ}team"
    assert md("@team") == f"@{ZWJ}team" and md("(@team)") == f"\\(@{ZWJ}team\\)"
    assert md("sdpa@cuda") == "sdpa@cuda"  # not a mention on GitHub: ids stay copy-pasteable
    assert md("one\ntwo\r\n\nthree") == "one two three"
    assert md("x" * 400) == "x" * 299 + "…"
    assert html_text('<a href="x">@me</a>') == f"&lt;a href=&quot;x&quot;&gt;@{ZWJ}me&lt;/a&gt;"
    block = code_block("a\n`````\nb", "sh")
    assert block.startswith("``````sh\n") and block.endswith("\n``````")
    assert code_block("plain", "s`h").startswith("```sh\n")


def test_value_formatting() -> None:
    assert format_seconds(0.00123) == "1.23 ms"
    assert format_seconds(0.000456) == "456 µs"
    assert format_seconds(0.00099996) == "1.00 ms"
    assert format_seconds(2.5) == "2.50 s"
    assert format_bytes(512 * 2**20) == "512.0 MiB"
    assert format_bytes(3 * 2**30) == "3.00 GiB"
    assert format_value(1.95e6, "tokens/s") == "1.95M tokens/s"
    assert format_value(0.002, None, "latency_p95") == "2.00 ms"
    assert format_value(None) == "—" and format_value(True) == "true"


@pytest.mark.parametrize("limit", [4000, 3000, 2000, 1500, 700, 300, 60])
def test_markdown_truncates_to_limit(limit: int) -> None:
    doc = rollback_record()
    full = render_markdown(doc)
    assert len(full) > limit
    text = render_markdown(doc, max_chars=limit, full_report_url=URL)
    assert len(text) <= limit
    if limit >= 300:
        match = re.search(
            r"(\d+) of (\d+) cell sections and (\d+) of (\d+) table rows were cut", text
        )
        assert match, text
        cut, total, rows_cut, rows = map(int, match.groups())
        assert total == 4 and rows == 4
        assert text.count("<details>") == text.count("</details>") == total - cut
        assert rows_cut == 0 or cut == total  # every section goes before any table row
        assert URL in text
        assert_tables_intact(outside_code(text))


def test_truncation_cuts_the_undecided_list_before_sections() -> None:
    doc = research_record()
    full = render_markdown(doc)
    text = render_markdown(doc, max_chars=len(full) - 1, full_report_url=URL)
    assert len(text) < len(full)
    assert "**Undecided" not in text and text.count("<details>") == 1
    assert "the list of undecided cells, 0 of 1 cell sections and 0 of 5 table rows" in text
    assert "No evidence on cuda, rocm, mps" in text
    smaller = render_markdown(doc, max_chars=2500, full_report_url=URL)
    assert len(smaller) <= 2500 and "<details>" not in smaller
    assert "1 of 1 cell sections" in smaller


def test_markdown_without_limit_or_when_it_fits_is_untouched() -> None:
    doc = rollback_record()
    full = render_markdown(doc, full_report_url=URL)
    assert render_markdown(doc, max_chars=len(full), full_report_url=URL) == full
    assert "cut" not in full


def test_junit_counts_match_record() -> None:
    doc = hostile_record()
    root = ET.fromstring(render_junit(doc))
    gates = [(c, g) for c in doc["cells"] for g in c["gates"]]
    failed = sum(g["verdict"] in ("fail", "new-failure") for _, g in gates)
    skipped = sum(
        g["verdict"] in ("inconclusive", "untested", "unsupported", "not-comparable")
        for _, g in gates
    )
    assert root.tag == "testsuite" and root.get("name") == "torch-matrix"
    cases = root.findall("testcase")
    assert len(cases) == int(root.get("tests", "")) == len(gates)
    assert len(root.findall("testcase/failure")) == int(root.get("failures", "")) == failed
    assert len(root.findall("testcase/skipped")) == int(root.get("skipped", "")) == skipped
    assert [(c.get("classname"), c.get("name")) for c in cases] == [
        (c["row_id"], f"{c['cell_id']}::{g['gate']}") for c, g in gates
    ]
    assert render_junit(doc).startswith("<?xml version='1.0' encoding='")


def test_table_shows_decision_and_rows() -> None:
    doc = hostile_record()
    text = render_table(doc)
    assert "torch-matrix decision: ROLLBACK" in text
    for r in doc["rows"]:
        assert r["row_id"] in text
    assert "\x1b" not in text and "Prototype lane" in text


def test_table_collapses_absent_backend_rows() -> None:
    doc = research_record()
    text = render_table(doc)
    tables, line = text.rstrip("\n").rsplit("\n", 1)
    assert "@cuda" not in tables and "@rocm" not in tables and "@mps" not in tables
    assert "sdpa@cpu" in tables and "rollback@any" in tables
    assert text.endswith(
        "\nNo evidence on cuda, rocm, mps (every cell skipped on both sides — cuda: torch "
        "2.13.0+cpu is not a CUDA build; rocm: torch 2.13.0+cpu is not a ROCm (HIP) build; mps: "
        "torch 2.13.0+cpu was built without MPS): 12 rows left out of the tables — "
        "flex_attention, sdpa, linear_cross_entropy, mlp_train on each\n"
    )
    assert line.startswith("No evidence on ")


def test_hostile_names_in_collapsed_lines_are_escaped() -> None:
    doc = research_record()
    for c in doc["cells"]:
        if c["workload"] in ("sdpa", "mlp_train"):
            c["workload"] = HOSTILE + c["workload"]
            c["cell_id"] = HOSTILE + c["cell_id"]
            c["row_id"] = HOSTILE + c["row_id"]
    for r in doc["rows"]:
        if r["workload"] in ("sdpa", "mlp_train"):
            r["workload"] = HOSTILE + r["workload"]
            r["row_id"] = HOSTILE + r["row_id"]
    validate(doc, "torch-matrix/decision", file="<test>")
    prose = outside_code(render_markdown(doc))
    assert "<img" not in prose and "@octocat" not in prose and f"@{ZWJ}octocat" in prose
    assert re.findall(r"</?details>", prose) == ["<details>", "</details>"]
    assert_tables_intact(prose)
    assert "\x1b" not in render_table(doc)


def test_registry_renders_every_format() -> None:
    doc = rollback_record()
    for fmt in format_names():
        assert render(doc, fmt).endswith("\n")
    assert json.loads(render(doc, "json")) == doc
    with pytest.raises(InputError):
        render(doc, "html")


def test_renderers_do_not_mutate_the_record() -> None:
    doc = hostile_record()
    before = copy.deepcopy(doc)
    for fmt in format_names():
        render(doc, fmt)
    assert doc == before


def test_chart_without_matplotlib_returns_false(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # makes `import matplotlib` raise
    assert write_chart(rollback_record(), tmp_path / "chart.png") is False
    assert not (tmp_path / "chart.png").exists()


def test_chart_writes_png_when_matplotlib_is_installed(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    path = tmp_path / "out" / "chart.png"
    assert write_chart(hostile_record(), path) is True
    assert path.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")


def _wide_decision(cells: int) -> dict[str, Any]:
    """A schema-valid decision of `cells` failing cells in as many rows, each with a long
    multi-byte message and a reproduce line: far above 1 MiB of Markdown uncut."""
    rows, body = [], []
    for i in range(cells):
        row_id = f"team_{i:03d}@cuda"
        rows.append(row(row_id, "production", "defer", ["a performance gate regressed"]))
        why = f"cell {i}: p50 rose " + "ünïcödé latency regression detail; " * 60
        body.append(
            cell(
                f"team_{i:03d}.bf16.s{i}@cuda",
                "production",
                [
                    gate("status", "pass", "hard", "ok on both sides", required=True),
                    latency("latency_p50", "fail", 0.0042, 0.0047, message=why),
                ],
                repro={
                    "command": f"torch-matrix run --cell team_{i:03d}.bf16.s{i}@cuda "
                    + "-x " * 400,
                    "docker": None,
                },
            )
        )
    doc = record("defer", ["a performance gate regressed"], rows, body)
    doc["rows"] = [dict(r, row_id=f"team_{i:03d}@cuda") for i, r in enumerate(doc["rows"])]
    for i, c in enumerate(doc["cells"]):
        c["row_id"] = f"team_{i:03d}@cuda"
    return doc


def test_job_summary_of_a_300_cell_decision_stays_under_1_mib(tmp_path: Path) -> None:
    from suite.github.outputs import SUMMARY_MAX_BYTES, append_summary

    doc = _wide_decision(300)
    full = render_markdown(doc).encode("utf-8")
    summary = tmp_path / "step_summary.md"
    # Earlier steps of the job already wrote to the summary: what is left is less than the
    # whole report, so rows must go.
    summary.write_text("## earlier step output\n" * 30_000, encoding="utf-8")
    before = summary.stat().st_size
    assert before + len(full) > SUMMARY_MAX_BYTES
    written = append_summary(doc, summary, URL)
    data = summary.read_bytes()
    assert len(data) == before + written <= SUMMARY_MAX_BYTES < 1 << 20
    assert written > 100_000  # rows were cut, not the whole report
    text = data[before:].decode("utf-8")  # whole characters: the cut is by rows, not bytes
    match = re.search(r"(\d+) of (\d+) cell sections and (\d+) of (\d+) table rows were cut", text)
    assert match, text[-2000:]
    assert int(match[2]) == 300 and URL in text
    assert_tables_intact(outside_code(text))
    assert text.count("<details>") == text.count("</details>")
    # A decision that fits is appended whole.
    small = tmp_path / "small.md"
    append_summary(rollback_record(), small, URL)
    assert small.read_text(encoding="utf-8") == render_markdown(
        rollback_record(), full_report_url=URL
    )
