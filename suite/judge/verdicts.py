"""The leaf every gate module builds on: a gate's verdict as the decision record holds it. It
imports nothing of the suite but the policy's Gate, so gates, metric gates and the rollback
checks share it without importing one another."""

from __future__ import annotations

from typing import Any

from suite.core.records import GateRecord, Verdict
from suite.judge.policy import Gate

Record = dict[str, Any]
FAILED = ("failed", "crashed", "timeout", "oom")


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
