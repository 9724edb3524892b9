"""The leaf every gate module builds on: a gate's verdict as the decision record holds it. It
imports nothing of the suite but the policy's Gate, so gates, metric gates and the rollback
checks share it without importing one another."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from suite.core.decision_records import GateRecord
from suite.core.records import Result, Verdict
from suite.judge.policy import Gate

Record = Result  # one round of one cell, as the judge reads it
FAILED = ("failed", "crashed", "timeout", "oom")
# The folders the two sides' saved files (outputs, per-function totals) lie in, baseline first;
# None where a side was not read from a folder.
Dirs = tuple["Path | None", "Path | None"]
NO_DIRS: Dirs = (None, None)


def failure_message(record: Record) -> str:
    """What went wrong in the round, as its failure says ("" where it ran)."""
    failure = record.get("failure")
    return failure["message"] if failure else ""


def failure_mode(record: Record) -> str | None:
    failure = record.get("failure")
    return failure["mode"] if failure else None


def gate_result(gate: Gate, verdict: Verdict, message: str, **numbers: Any) -> GateRecord:
    """One gate's verdict as the decision record holds it (numbers default to None)."""
    out: GateRecord = {
        "gate": gate.name,
        "verdict": verdict,
        "severity": gate.severity,
        "required": gate.required,
        "message": message,
        "unit": None,
        "baseline": None,
        "candidate": None,
        "change": None,
        "ci": None,
        "p_value": None,
        "threshold": gate.threshold,
    }
    out.update(numbers)  # type: ignore[typeddict-item]
    return out


def row_id_of(spec: Mapping[str, Any]) -> str:
    """A cell's row: its workload on its backend, and its model where the workload takes one
    (`model`), so that each model a workload runs is adopted or held back on its own."""
    model = spec["params"].get("model")
    name = f"{spec['workload']}.{model}" if model is not None else str(spec["workload"])
    return f"{name}@{spec['backend']}"
