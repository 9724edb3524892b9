"""One failing cell's section of the report: its gates in full, what moved, where the time
went, how to reproduce it and its artifacts, folded in a <details> block under the tables."""

from __future__ import annotations

import re
from collections.abc import Iterable

from suite.core.decision_records import (
    Cell,
    GateRecord,
    Repro,
)
from suite.report.escape import code_block, code_span, html_text, md
from suite.report.opdiff import render_op_diff
from suite.report.table import (
    GOOD,
    NONE,
    VERDICT_ORDER,
    format_change,
    format_ci,
    format_p,
    format_threshold,
    format_value,
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


def table_line(cells: Iterable[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def _verdict_summary(cell: Cell) -> str:
    groups = []
    for verdict in VERDICT_ORDER:
        names = [g["gate"] for g in cell["gates"] if g["verdict"] == verdict]
        if names and verdict not in GOOD:
            groups.append(f"{verdict}: {', '.join(names)}")
    return "; ".join(groups)


def _gate_line(gate: GateRecord) -> str:
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
    return table_line(md(text) for text in texts)


def cell_section(cell: Cell, run_url: str | None = None) -> str:
    # <summary> sits in a raw HTML block, where only HTML escaping works.
    summary = f"{html_text(cell['cell_id'])} — {html_text(_verdict_summary(cell))}"
    status = (
        f"Status: baseline {md(cell['baseline_status'] or NONE)}, "
        f"candidate {md(cell['candidate_status'] or NONE)}"
    )
    table = [
        table_line(_DETAIL_HEADERS),
        table_line(["---"] * len(_DETAIL_HEADERS)),
        *(_gate_line(g) for g in cell["gates"]),
    ]
    # The blank line after <summary> ends the HTML block, so what follows is Markdown.
    parts = [f"<details><summary>{summary}</summary>", status, *_model_parts(cell)]
    parts += ["\n".join(table), *_curve_parts(cell)]
    parts += _moved_parts(cell)
    if cell.get("ops"):
        parts += ["Where the time went (5 profiled steps per side, self time):"]
        parts += [render_op_diff(cell["ops"])]
    elif cell.get("ops_warning"):
        parts += [f"Where the time went: {md(cell['ops_warning'])}"]
    parts += _repro_parts(cell.get("repro") or {}, run_url)
    artifacts = cell.get("artifacts") or {}
    if artifacts:
        listing = [f"- {md(name)}: {md(path)}" for name, path in sorted(artifacts.items())]
        parts += ["Artifacts:", "\n".join(listing)]
    parts.append("</details>")
    return "\n\n".join(parts)


def _model_parts(cell: Cell) -> list[str]:
    """The model the cell ran, as its workload named it (ctx.model)."""
    model = cell.get("model")
    if not model:
        return []
    text = f"Model: {code_span(str(model.get('class', NONE)))}"
    if isinstance(model.get("parameters"), int):
        text += f", {model['parameters']:,} parameters"
        trainable = model.get("trainable_parameters")
        if isinstance(trainable, int) and trainable != model["parameters"]:
            text += f" ({trainable:,} trainable)"
    if model.get("dtypes"):
        text += f", {md('/'.join(model['dtypes']))}"
    if model.get("config_sha256"):
        text += f", config {code_span(str(model['config_sha256'])[:12])}"
    return [text]


CURVE_ROWS = 10  # steps shown of a loss curve: evenly spaced, the first and the last among them


def _loss(value: float | None) -> str:
    return "NaN/inf" if value is None else f"{value:.6g}"


def _curve_parts(cell: Cell) -> list[str]:
    """Each side's loss per step (ctx.loss_curve), as a small table: the convergence gate's
    figures at a glance."""
    curves = cell.get("loss_curves") or {}
    base, cand = curves.get("baseline") or [], curves.get("candidate") or []
    steps = max(len(base), len(cand))
    if not steps:
        return []
    shown = sorted({round(i * (steps - 1) / max(1, CURVE_ROWS - 1)) for i in range(CURVE_ROWS)})
    shown = [i for i in shown if i < steps]
    rows = [
        table_line(["Step", "Baseline loss", "Candidate loss", "Change"]),
        table_line(["---"] * 4),
    ]
    for i in shown:
        b = base[i] if i < len(base) else None
        c = cand[i] if i < len(cand) else None
        change = (c - b) / abs(b) if b is not None and c is not None and b != 0 else None
        rows.append(table_line([str(i), _loss(b), _loss(c), format_change(change)]))
    return [f"Loss per step ({steps} steps):", "\n".join(rows)]


def _moved_parts(cell: Cell) -> list[str]:
    """The functions whose instructions per step moved most, for an instructions gate that
    failed or improved: why it is slower, not only that it is."""
    parts = []
    for gate in cell["gates"]:
        moved = gate.get("moved") or []
        if not moved:
            continue
        rows = [
            table_line(["Function", "Baseline", "Candidate", "Change"]),
            table_line(["---"] * 4),
            *(
                table_line(
                    [
                        md(m["function"], 160),
                        f"{m['baseline']:,.0f}",
                        f"{m['candidate']:,.0f}",
                        f"{m['change']:+,.0f}",
                    ]
                )
                for m in moved
            ),
        ]
        parts += [f"What moved ({md(gate['gate'])}, per step):", "\n".join(rows)]
    return parts


_RUN_URL = re.compile(r"^https?://[^/]+/([^/]+/[^/]+)/actions/runs/([0-9]+)")


def _fetch_line(root: str, run_url: str | None) -> str:
    """The `gh` line that downloads a job's results artifact: of this run, when its URL says."""
    found = _RUN_URL.match(run_url or "")
    run = f"{found[2]} -R {found[1]}" if found else "RUN_ID"
    return f"gh run download {run} -n {root} -D {root} && cd {root}"


def _repro_parts(repro: Repro, run_url: str | None = None) -> list[str]:
    """How to reproduce a failing cell: the `docker build` lines of images in no registry, the
    candidate's `docker run` line (a status or correctness failure), the `ab` line of both sides
    (a timing or memory regression), else the line for the side's interpreter."""
    root = repro.get("root")
    where = f", in the results folder {code_span(root)}" if root else ""
    parts = []
    builds = repro.get("build") or {}
    if builds:
        text = "\n".join(f"# the {role} image\n{line}" for role, line in sorted(builds.items()))
        parts += [
            "The images are in no registry; where one is missing, build it again first:",
            code_block(text, "sh"),
        ]
    if repro.get("docker"):
        parts += [f"In the recorded image{where}:", code_block(repro["docker"], "sh")]
    if repro.get("ab"):
        parts += [f"The paired comparison again, both sides{where}:", code_block(repro["ab"], "sh")]
    if repro.get("command") and not repro.get("docker"):
        parts += ["Reproduce:", code_block(repro["command"], "sh")]
    if root and (repro.get("docker") or repro.get("ab")):
        fetch = code_span(_fetch_line(root, run_url))
        parts.append(
            f"_In CI, {code_span(root)} is the job's results artifact: {fetch} (README, "
            "Reproducing a cell)._"
        )
    return parts
