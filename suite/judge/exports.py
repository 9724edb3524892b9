"""The export gate for any workload: each export path a cell tried (`ctx.export_path`), compared
between the pins. A path that worked on the baseline and fails on the candidate is a new
failure; one that fails on both fails (the candidate cannot export it either); one the
candidate fixed is fixed. Paths the policy's `paths` does not name are left out, unless it names
none."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from suite.core.decision_records import GateRecord
from suite.core.records import Verdict
from suite.judge.policy import Gate
from suite.judge.verdicts import Record, gate_result

# Worst first, for one verdict over a cell's paths.
ORDER: tuple[Verdict, ...] = ("new-failure", "fail", "untested", "fixed", "pass")


def exports_of(records: Sequence[Record]) -> dict[str, Mapping[str, Any]] | None:
    """One side's export attempts (its first record that has any); None when none has."""
    for record in records:
        found = record.get("exports")
        if found:
            return dict(found)
    return None


def _one(
    path: str, b: Mapping[str, Any] | None, c: Mapping[str, Any] | None
) -> tuple[Verdict, str]:
    if c is None:
        return "untested", f"{path}: not tried on the candidate"
    if c["ok"]:
        err = c.get("max_abs_error")
        shown = f" (max abs error {err:.3g})" if isinstance(err, (int, float)) else ""
        if b is not None and not b["ok"]:
            return "fixed", f"{path} runs{shown}; it failed on the baseline"
        return "pass", f"{path} runs{shown}"
    why = c.get("error") or "no error recorded"
    if b is not None and b["ok"]:
        return "new-failure", f"{path} fails on the candidate, ran on the baseline: {why}"
    return "fail", f"{path} fails: {why}"


def plugin_exports(gate: Gate, base: Sequence[Record], cand: Sequence[Record]) -> GateRecord | None:
    b, c = exports_of(base), exports_of(cand)
    if b is None and c is None:
        return None
    paths = [
        p for p in dict.fromkeys([*(b or {}), *(c or {})]) if not gate.paths or p in gate.paths
    ]
    if not paths:
        return None  # the workload tried only paths the policy does not judge
    if c is None:
        return gate_result(gate, "untested", "no export attempt on the candidate side")
    judged = [_one(p, (b or {}).get(p), c.get(p)) for p in paths]
    worst = min((v for v, _ in judged), key=ORDER.index)
    ordered = sorted(judged, key=lambda j: ORDER.index(j[0]))
    message = "; ".join(text for _, text in ordered)
    failed = sum(1 for v, _ in judged if v in ("fail", "new-failure"))
    return gate_result(
        gate, worst, message[:900], baseline=None, candidate=failed, unit="failing paths"
    )
