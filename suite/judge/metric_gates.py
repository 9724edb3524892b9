"""Gates computed from workload metrics and saved outputs rather than timing.

graph_breaks, recompiles (any workload that records them: the compile workload, or ctx.explain
and ctx.recompiles), export (the export workload, or any workload's ctx.export_path),
determinism (determinism workload), drift (any workload that saves outputs) and fallback (MPS
cells, and any cell whose workload says part of it ran on the CPU).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from suite.core.decision_records import GateRecord
from suite.core.records import Verdict
from suite.judge.exports import plugin_exports
from suite.judge.policy import Gate
from suite.judge.saved_outputs import NotMeasurable, saved_drift
from suite.judge.verdicts import NO_DIRS, Dirs, Record, failure_message, gate_result

GateFn = Callable[[Gate, Sequence[Record], Sequence[Record]], GateRecord | None]


def _metric(records: Sequence[Record], name: str) -> Any:
    for record in records:
        metric = (record.get("metrics") or {}).get(name)
        if metric is not None and metric.get("value") is not None:
            return metric["value"]
    return None


def _both(
    gate: Gate, base: Sequence[Record], cand: Sequence[Record], name: str
) -> tuple[Any, Any] | GateRecord | None:
    """Both sides' metric, a verdict when only one side has it, None when neither does."""
    b, c = _metric(base, name), _metric(cand, name)
    if b is None and c is None:
        return None
    if b is None or c is None:
        side = "baseline" if b is None else "candidate"
        return gate_result(gate, "untested", f"no {name} on the {side} side")
    return b, c


def _counts(name: str, reasons: str) -> GateFn:
    def gate_fn(gate: Gate, base: Sequence[Record], cand: Sequence[Record]) -> GateRecord | None:
        both = _both(gate, base, cand, name)
        if not isinstance(both, tuple):
            return both
        b, c = int(both[0]), int(both[1])
        numbers = {"baseline": b, "candidate": c}
        if c > b:
            new = [
                r
                for r in str(_metric(cand, reasons) or "").split(" | ")
                if r and r not in str(_metric(base, reasons) or "")
            ]
            why = f"; new: {'; '.join(new)[:600]}" if new else ""
            if not gate.must_not_grow:  # the policy allows growth: say it, do not fail
                text = f"{name} grew {b} -> {c}{why} (allowed: must_not_grow is false)"
                return gate_result(gate, "pass", text, **numbers)
            return gate_result(gate, "fail", f"{name} grew {b} -> {c}{why}", **numbers)
        if c < b:
            return gate_result(gate, "improved", f"{name} fell {b} -> {c}", **numbers)
        return gate_result(gate, "pass", f"{name} unchanged at {c}", **numbers)

    return gate_fn


def export(gate: Gate, base: Sequence[Record], cand: Sequence[Record]) -> GateRecord | None:
    """The built-in export workload (a path per cell, its status the verdict), or any workload's
    own export attempts (suite/judge/exports.py)."""
    records = cand or base
    if any(r.get("exports") for r in [*base, *cand]):
        return plugin_exports(gate, base, cand)
    if not records or records[0]["spec"]["workload"] != "export":
        return None
    path = str(records[0]["spec"]["params"].get("path"))
    if gate.paths and path not in gate.paths:
        return None
    if not cand:
        return gate_result(gate, "untested", f"export path {path}: no candidate result")
    status = cand[0]["status"]
    b_status = base[0]["status"] if base else None
    message = failure_message(cand[0])
    if status == "ok":
        err = _metric(cand, "max_abs_error")
        return gate_result(
            gate,
            "pass" if b_status == "ok" else "fixed",
            f"export path {path} runs (max abs error {err})",
            candidate=err,
        )
    if status == "skipped":  # e.g. onnxruntime missing here: the path cannot be shown to work
        return gate_result(gate, "unsupported", f"export path {path} skipped: {message}")
    if status == "unsupported":
        return gate_result(gate, "unsupported", f"export path {path} unsupported: {message}")
    broke: Verdict = "new-failure" if b_status == "ok" else "fail"
    return gate_result(gate, broke, f"export path {path} {status}: {message[:400]}")


def determinism(gate: Gate, base: Sequence[Record], cand: Sequence[Record]) -> GateRecord | None:
    if _metric([*base, *cand], "deterministic_cross_process") is None:
        if (
            cand
            and cand[0]["spec"]["workload"] == "determinism"
            and cand[0]["status"] == "unsupported"
        ):
            return gate_result(gate, "unsupported", failure_message(cand[0]))
        return None
    c_in, c_x = (
        _metric(cand, "deterministic_in_process"),
        _metric(cand, "deterministic_cross_process"),
    )
    if c_in is None or c_x is None:
        return gate_result(gate, "untested", "no determinism result on the candidate side")
    b_ok = _metric(base, "deterministic_in_process") and _metric(
        base, "deterministic_cross_process"
    )
    if c_in and c_x:
        return gate_result(
            gate, "pass" if b_ok else "fixed", "bitwise identical in and across processes"
        )
    where = "across processes" if not c_x else "within one process"
    first, diff = _metric(cand, "first_difference"), _metric(cand, "max_difference")
    if _metric(cand, "deterministic_algorithms") is False:
        # torch's default algorithms: nondeterminism is allowed, and detected. Only a
        # candidate that became nondeterministic where the baseline was not fails.
        found = f"nondeterministic {where} with torch's default algorithms"
        if not b_ok:
            text = f"{found}, as on the baseline: first differing tensor {first!r}"
            return gate_result(gate, "pass", text, candidate=diff)
        text = f"{found}, the baseline was deterministic: first differing tensor {first!r}"
        return gate_result(gate, "fail", text, candidate=diff)
    was = "" if b_ok else " (the baseline was not deterministic either)"
    return gate_result(
        gate,
        "fail",
        f"not deterministic {where}: first differing tensor {first!r}, "
        f"max difference {diff:.3g}{was}",
        candidate=diff,
    )


def drift(
    gate: Gate, base: Sequence[Record], cand: Sequence[Record], dirs: Dirs = NO_DIRS
) -> GateRecord | None:
    """Outputs of the same seeded step on both pins, against the policy's relative tolerance;
    the files lie in the sides' folders."""
    b = next((o for r in base if (o := r.get("outputs"))), None)
    c = next((o for r in cand if (o := r.get("outputs"))), None)
    if b is None and c is None:
        return None
    if b is None or c is None:
        return gate_result(gate, "untested", "saved outputs on one side only")
    b_dir, c_dir = dirs
    if b_dir is None or c_dir is None:
        return gate_result(gate, "untested", "the saved outputs' folders are not known")
    spec = next(r["spec"] for r in base if r.get("outputs"))
    dtype = str(spec["params"].get("dtype", "fp32"))
    tolerance = (gate.relative_tolerance or {}).get(dtype, gate.threshold or 1e-4)
    try:
        found = saved_drift(b_dir / b["file"], c_dir / c["file"])
    except NotMeasurable as exc:
        return gate_result(gate, "untested", str(exc))
    if found.missing:
        return gate_result(
            gate, "fail", f"output {found.name!r} missing or reshaped on the candidate"
        )
    worst_name, worst = found.name, found.relative
    numbers = {"candidate": worst, "threshold": tolerance}
    if worst > tolerance:
        return gate_result(
            gate,
            "fail",
            f"{worst_name}: relative drift {worst:.3g} > {tolerance:g} ({dtype})",
            **numbers,
        )
    return gate_result(
        gate,
        "pass",
        f"max relative drift {worst:.3g} ({worst_name or 'none'}) <= {tolerance:g}",
        **numbers,
    )


def fallback(gate: Gate, base: Sequence[Record], cand: Sequence[Record]) -> GateRecord | None:
    """Ops that ran on the CPU instead of the backend (MPS's fallback, or a workload's own
    CellContext.fell_back): fail, unless the policy allows it. None where nothing records one
    (every backend but MPS, for workloads that do not say so)."""
    b = [f for r in base if (f := r.get("fallback"))]
    c = [f for r in cand if (f := r.get("fallback"))]
    if not b and not c:
        return None
    if not c:
        return gate_result(gate, "untested", "no fallback record on the candidate side")
    fell = [m for f in c if f.get("happened") for m in (f.get("messages") or [])]
    if not any(f.get("happened") for f in c):
        off = not all(f.get("enabled", True) for f in c)
        text = "no op fell back to the CPU" + (
            " (fallback off: an op without a kernel on the backend fails the cell)" if off else ""
        )
        return gate_result(gate, "pass", text, candidate=0)
    was = "the baseline too" if any(f.get("happened") for f in b) else "the baseline did not"
    first = fell[0] if fell else "no message recorded"
    text = f"{len(fell) or 1} op(s) fell back to the CPU ({was}): {first}"
    if gate.allow:
        return gate_result(gate, "pass", f"allowed by the policy: {text}", candidate=len(fell))
    return gate_result(gate, "fail", text, candidate=len(fell))


METRIC_GATES: dict[str, GateFn] = {
    "graph_breaks": _counts("graph_breaks", "graph_break_reasons"),
    "recompiles": _counts("recompiles", "recompile_reasons"),
    "export": export,
    "determinism": determinism,
    "fallback": fallback,
}
