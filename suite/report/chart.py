"""Latency chart: baseline vs candidate p50 and p95 per cell, as a PNG (optional matplotlib).

matplotlib is an optional extra, so it is imported only when a chart is asked for, and
through importlib so that type checking does not depend on it being installed. The Agg
canvas is used directly, without pyplot: no global backend switch, no figure registry.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

from suite.core.decision_records import DecisionRecord
from suite.report.escape import plain
from suite.report.table import gate_of

# (gate, side, legend label) for the four bars of each cell, in drawing order.
_SERIES = (
    ("latency_p50", "baseline", "baseline p50"),
    ("latency_p50", "candidate", "candidate p50"),
    ("latency_p95", "baseline", "baseline p95"),
    ("latency_p95", "candidate", "candidate p95"),
)
_LABEL_LIMIT = 60
_UNITS = ((1.0, "s"), (1e-3, "ms"), (1e-6, "µs"), (1e-9, "ns"))


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def latency_points(decision: DecisionRecord) -> list[tuple[str, list[float | None]]]:
    """(cell_id, [baseline p50, candidate p50, baseline p95, candidate p95]) in seconds."""
    points: list[tuple[str, list[float | None]]] = []
    for cell in decision["cells"]:
        values: list[float | None] = []
        for gate_name, side, _ in _SERIES:
            gate = gate_of(cell, gate_name)
            values.append(None if gate is None else _number(gate.get(side)))
        if any(v is not None for v in values):
            points.append((cell["cell_id"], values))
    return points


def _unit(points: list[tuple[str, list[float | None]]]) -> tuple[float, str]:
    top = max(abs(v) for _, values in points for v in values if v is not None)
    return next(((s, n) for s, n in _UNITS if top >= s), _UNITS[-1])


def write_chart(decision: DecisionRecord, path: Path) -> bool:
    """Write the PNG and return True; False (nothing written) without matplotlib or latencies."""
    try:
        figure_mod = importlib.import_module("matplotlib.figure")
        agg = importlib.import_module("matplotlib.backends.backend_agg")
    except ImportError:
        return False
    points = latency_points(decision)
    if not points:
        return False
    scale, unit = _unit(points)
    height = 0.18
    fig = figure_mod.Figure(figsize=(9.0, 1.2 + 0.9 * len(points)), layout="constrained")
    agg.FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    # Top-to-bottom in record order: barh counts y upwards, so the first cell gets the top.
    ys = [float(len(points) - 1 - i) for i in range(len(points))]
    for k, (_, _, label) in enumerate(_SERIES):
        offset = (1.5 - k) * height
        widths = [(values[k] or 0.0) / scale for _, values in points]
        ax.barh([y + offset for y in ys], widths, height=height, label=label)
    ax.set_yticks(ys)
    # Long ids would squeeze the plot; "$" would start matplotlib's mathtext parser.
    labels = [plain(cell_id, _LABEL_LIMIT).replace("$", r"\$") for cell_id, _ in points]
    ax.set_yticklabels(labels, fontsize=8)
    ax.set_xlabel(f"latency ({unit})")
    ax.set_title("torch-matrix: baseline vs candidate latency")
    ax.legend(loc="best", fontsize=8)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(str(path), format="png", dpi=100)
    return True
