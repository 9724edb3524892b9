"""The terminal table of a calibration record: cell x timing gate, spread against threshold.

Only renders; suite.flows.calibrate works the numbers out.
"""

from __future__ import annotations

from tabulate import tabulate

from suite.core.decision_records import CalibrationRecord
from suite.report.escape import plain

NONE = "—"
TOO_TIGHT = "below resolution"


def _pct(x: float | None) -> str:
    return f"{x:.1%}" if x is not None else NONE


def render_calibration(calibration: CalibrationRecord) -> str:
    runner = calibration["runner"]
    design = calibration["design"]
    rounds = calibration["resolvable_rounds"]
    budget = f", budget {design['budget_s']:g}s" if design.get("budget_s") is not None else ""
    reach = f"verdicts can rest on {rounds} rounds" if rounds else "the budget reaches no look"
    head = plain(
        f"{calibration['rounds']} A/A rounds of torch {runner['torch']} on "
        f"{runner['hostname']} ({runner['cpu_model']}); looks at "
        f"{', '.join(map(str, design['looks']))}{budget}: {reach}",
        None,
    )
    grid: list[list[object]] = []
    for cell in calibration["cells"]:
        if not cell["gates"]:  # no paired timing: say why instead of leaving the cell out
            grid.append([plain(cell["cell_id"], None), *[NONE] * 5, cell["status"]])
        for name, gate in cell["gates"].items():
            detectable = gate["min_detectable"]
            tight = detectable is None or gate["threshold"] < detectable
            grid.append(
                [
                    plain(cell["cell_id"], None),
                    name,
                    _pct(gate["spread"]),
                    _pct(detectable),
                    _pct(gate["threshold"]),
                    gate["rounds_needed"] if gate["rounds_needed"] is not None else NONE,
                    TOO_TIGHT if tight and gate["spread"] is not None else "",
                ]
            )
    headers = ["cell", "gate", "spread", "min detectable", "threshold", "rounds needed", ""]
    return head + "\n\n" + tabulate(grid, headers=headers, tablefmt="simple") + "\n"
