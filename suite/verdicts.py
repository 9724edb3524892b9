"""The leaf every gate module builds on: a gate's verdict as the decision record holds it. It
imports nothing of the suite but the policy's Gate, so gates, metric gates and the rollback
checks share it without importing one another."""

from __future__ import annotations

from typing import Any

from suite.policy import Gate

Record = dict[str, Any]
FAILED = ("failed", "crashed", "timeout", "oom")


def gate_result(gate: Gate, verdict: str, message: str, **numbers: Any) -> dict[str, Any]:
    """One gate's verdict as the decision record holds it (numbers default to None)."""
    out: dict[str, Any] = {
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
    out.update(numbers)
    return out
