"""The model a cell runs, compared between the sides, and carried into its decision cell with
its loss curves. A workload that names its model
(`ctx.model(module, config=...)`) records its class, parameter count and config digest; when
they differ between the pins for one cell (a library's default config that moved, a seed that
builds another architecture), the cell measured two different models and the decision says so:
its gates compare a changed workload, not only the pin."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from suite.core.decision_records import Cell
from suite.core.loaded import LoadedRun

SHOWN = 3
# Record field -> how a reason line names it.
FIELDS = {
    "class": "class",
    "parameters": "parameters",
    "dtypes": "dtypes",
    "config_sha256": "config",
}


def _model(records: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    for record in records:
        if isinstance(record.get("model"), Mapping):
            return dict(record["model"])
    return None


def _short(field: str, value: Any) -> str:
    if value is None:
        return "none"
    if field == "config_sha256":
        return str(value)[:12]
    if isinstance(value, list):
        return "/".join(str(v) for v in value)
    return f"{value:,}" if isinstance(value, int) else str(value)


def model_differences(base: LoadedRun, cand: LoadedRun) -> list[str]:
    """One entry per cell whose two sides name different models: what differs, and how."""
    out = []
    for cell_id in dict.fromkeys([*base.results, *cand.results]):
        b = _model(base.results.get(cell_id, []))
        c = _model(cand.results.get(cell_id, []))
        if b is None or c is None:
            continue  # named on one side only, or on neither: nothing to compare
        moved = [
            f"{label} {_short(f, b.get(f))} → {_short(f, c.get(f))}"
            for f, label in FIELDS.items()
            if b.get(f) != c.get(f)
        ]
        if moved:
            out.append(f"{cell_id}: {', '.join(moved)}")
    return out


MODELS_LINE = "the model differs between the sides"


def models_line(diffs: Sequence[str]) -> str:
    more = f" (+{len(diffs) - SHOWN} more)" if len(diffs) > SHOWN else ""
    return (
        f"{MODELS_LINE} — each pin measured another model, a changed workload, not only the "
        f"pin: {'; '.join(diffs[:SHOWN])}{more}"
    )


def add_identity(
    cell: Cell, base: Sequence[Mapping[str, Any]], cand: Sequence[Mapping[str, Any]]
) -> None:
    """The model a cell ran (the candidate's, else the baseline's, config left in the results) and
    each side's loss curve, where the workload recorded them: for the cell's report section."""
    model = _model(cand) or _model(base)
    if model is not None:
        cell["model"] = {k: v for k, v in model.items() if k != "config"}
    curves = {role: _values(records) for role, records in (("baseline", base), ("candidate", cand))}
    if any(v is not None for v in curves.values()):
        cell["loss_curves"] = curves


def _values(records: Sequence[Mapping[str, Any]]) -> list[float | None] | None:
    for record in records:
        curve = record.get("loss_curve")
        if isinstance(curve, Mapping) and curve.get("values"):
            return list(curve["values"])
    return None
