"""The scaling table of a report: each scaling row's efficiencies (per-rank throughput at a
world over the smallest world's), the baseline's beside the candidate's."""

from __future__ import annotations

from suite.core.decision_records import DecisionRecord
from suite.report.cell_section import table_line
from suite.report.escape import md

TITLE = "### Scaling"
_HEADER = (
    "Per-rank throughput at each world over the case's smallest world, on each pin.\n\n"
    "| Case | Worlds | Baseline | Candidate | Change | Verdict |\n"
    "| --- | --- | --- | --- | --- | --- |"
)


def _number(value: object) -> str:
    return f"{value:.2f}" if isinstance(value, (int, float)) else "—"


def scaling_table(decision: DecisionRecord) -> str | None:
    """The table, or None where the decision has no scaling cell."""
    lines = []
    for cell in decision["cells"]:
        gate = next((g for g in cell["gates"] if g["gate"] == "scaling"), None)
        if gate is None or not cell["cell_id"].startswith("scaling."):
            continue
        case, _, worlds = (
            cell["cell_id"].removeprefix("scaling.").rpartition("@")[0].rpartition(".")
        )
        change = gate.get("change")
        lines.append(
            table_line(
                [
                    md(f"{case}@{cell['backend']}"),
                    md(worlds.replace("-over-", " over ")),
                    _number(gate.get("baseline")),
                    _number(gate.get("candidate")),
                    f"{change:+.1%}" if isinstance(change, (int, float)) else "—",
                    md(gate["verdict"]),
                ]
            )
        )
    if not lines:
        return None
    return f"{TITLE}\n\n{_HEADER}\n" + "\n".join(lines)
