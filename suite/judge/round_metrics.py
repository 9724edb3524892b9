"""Gates on a figure a workload records once per round (a metric), judged like the timing
gates: one paired value per round, ln(candidate / baseline), the same sequential test at the
policy's looks and levels. Worse is larger for every one of them.

  checkpoint_save   save_s: the median DCP save of the checkpoint workload's steady calls
  checkpoint_load   load_s: the median DCP load (into the model and optimizer) of the same
  recovery          recovery_s: a killed rank to the first step after the group resumed
  comm_exposed      comm_exposed_s_per_step: communication no compute overlapped, the worst
                    rank's, per training step

A gate whose metric no record of the cell has does not apply to it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

ROUND_METRICS: dict[str, str] = {
    "checkpoint_save": "save_s",
    "checkpoint_load": "load_s",
    "recovery": "recovery_s",
    "comm_exposed": "comm_exposed_s_per_step",
}

LABELS: dict[str, str] = {
    "checkpoint_save": "save",
    "checkpoint_load": "load",
    "recovery": "recovery",
    "comm_exposed": "exposed communication",
}


def metric_value(record: Mapping[str, Any], gate: str) -> float | None:
    """The round's figure for GATE: its metric, where positive and finite."""
    entry = (record.get("metrics") or {}).get(ROUND_METRICS[gate])
    value = entry.get("value") if isinstance(entry, dict) else None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if 0 < float(value) < float("inf") else None
