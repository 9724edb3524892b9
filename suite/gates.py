"""Gate verdicts for one cell: baseline records vs candidate records, under a policy.

Every function returns plain data (a gate dict of the decision schema); nothing here renders.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

from suite import accuracy, paired
from suite.policy import Gate, Policy
from suite.stats import NOISY_RELATIVE_IQR

Record = dict[str, Any]
FAILED = ("failed", "crashed", "timeout", "oom")


def side_status(records: Sequence[Record]) -> str | None:
    """One status for a side's rounds: any real failure wins, then unsupported, then skipped."""
    if not records:
        return None
    statuses = [_effective_status(r) for r in records]
    for status in (*FAILED, "unsupported", "skipped"):
        if status in statuses:
            return status
    return "ok"


def _effective_status(record: Record) -> str:
    # A failed accuracy check is the correctness gate's business; the cell itself ran.
    failure = record.get("failure") or {}
    if record["status"] == "failed" and failure.get("mode") == "correctness":
        return "ok"
    return str(record["status"])


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


def status_gate(
    gate: Gate, base: str | None, cand: str | None, cand_msg: str, *, dependency: bool = False
) -> dict[str, Any]:
    """dependency: both sides skipped the cell for an optional package missing here."""
    numbers = {"baseline": base, "candidate": cand}
    if base is None or cand is None:
        side = "baseline" if base is None else "candidate"
        return gate_result(gate, "untested", f"no result on the {side} side", **numbers)
    if dependency:
        # Neither pin can run it in this environment; which backend is tested is unaffected.
        return gate_result(gate, "unsupported", f"skipped on both pins: {cand_msg}", **numbers)
    if "skipped" in (base, cand):
        return gate_result(
            gate, "untested", f"skipped (baseline {base}, candidate {cand})", **numbers
        )
    if base == "unsupported" and cand == "unsupported":
        return gate_result(gate, "unsupported", f"unsupported on both pins: {cand_msg}", **numbers)
    if base == "ok" and cand == "ok":
        return gate_result(gate, "pass", "ran on both pins", **numbers)
    if base == "ok":
        return gate_result(gate, "new-failure", f"candidate {cand}: {cand_msg}", **numbers)
    if cand == "ok":
        verdict = "improved" if base == "unsupported" else "fixed"
        return gate_result(gate, verdict, f"baseline {base}, candidate runs", **numbers)
    return gate_result(
        gate,
        "untested",
        f"fails on both pins (baseline {base}, candidate {cand}): {cand_msg}",
        **numbers,
    )


def _checks(records: Sequence[Record]) -> list[dict[str, Any]]:
    for record in records:
        if record.get("correctness"):
            return list(record["correctness"].get("checks") or [record["correctness"]])
    return []


def _judge_checks(checks: list[dict[str, Any]], gate: Gate) -> tuple[bool, dict[str, Any] | None]:
    """Re-judge stored RMSEs with the policy's tolerances; return (passed, worst failing check)."""
    worst: dict[str, Any] | None = None
    for check in checks:
        verdict = accuracy.judge(
            check["rmse_result"], check["rmse_reference"], check["dtype"], gate.tolerances
        )
        if not verdict.passed and worst is None:
            worst = {**check, **verdict.as_dict()}
    return worst is None, worst


def correctness_gate(
    gate: Gate, base: Sequence[Record], cand: Sequence[Record], status: dict[str, Any]
) -> dict[str, Any] | None:
    if status["verdict"] not in ("pass", "fixed", "improved"):
        verdict = (
            status["verdict"] if status["verdict"] in ("untested", "unsupported") else "untested"
        )
        return gate_result(gate, verdict, "no accuracy result to judge: " + status["message"])
    cand_checks, base_checks = _checks(cand), _checks(base)
    if not cand_checks and not base_checks:
        return None  # the workload checks no accuracy (e.g. determinism): nothing to judge
    if not cand_checks:
        return gate_result(gate, "untested", "the baseline checked accuracy, the candidate did not")
    cand_ok, worst = _judge_checks(cand_checks, gate)
    base_ok, _ = _judge_checks(base_checks, gate) if base_checks else (True, None)
    if not cand_ok and worst is not None:
        bound = worst["k"] * worst["rmse_reference"] + worst["tol"]
        return gate_result(
            gate,
            "fail",
            f"{worst.get('label', 'output')}: RMSE vs fp64 {worst['rmse_result']:.3g} > "
            f"{worst['k']:g} x {worst['rmse_reference']:.3g} + {worst['tol']:g} (reference: "
            f"{worst.get('reference', '?')}){'' if base_ok else '; the baseline fails too'}",
            candidate=worst["rmse_result"],
            threshold=bound,
        )
    if not base_ok:
        return gate_result(
            gate, "fixed", "the baseline failed its accuracy check; the candidate passes"
        )
    worst_cand = max(cand_checks, key=lambda c: c["rmse_result"])
    worst_base = next((c for c in base_checks if c.get("label") == worst_cand.get("label")), None)
    return gate_result(
        gate,
        "pass",
        f"{len(cand_checks)} accuracy checks pass",
        candidate=worst_cand["rmse_result"],
        baseline=worst_base["rmse_result"] if worst_base else None,
    )


def _timings(records: Sequence[Record]) -> list[dict[str, Any]]:
    return [r["timing"] for r in records if r.get("timing") and _effective_status(r) == "ok"]


def _noisy(records: Sequence[Record]) -> float:
    values = [r["noise"]["relative_iqr"] for r in records if r.get("noise")]
    return statistics.median(values) if values else 0.0


def timing_gate(
    gate: Gate,
    policy: Policy,
    base: Sequence[Record],
    cand: Sequence[Record],
    *,
    stat: str,
    throughput: bool = False,
    comparable: bool = True,
) -> dict[str, Any]:
    bt, ct = _timings(base), _timings(cand)
    if not bt or not ct:
        return gate_result(gate, "untested", "no steady-state timing on both sides")
    if not comparable:
        return gate_result(
            gate, "not-comparable", "the two sides ran on different machines or images"
        )
    noise = max(_noisy(base), _noisy(cand))
    b_rounds = [t["summary"][stat] for t in bt]
    c_rounds = [t["summary"][stat] for t in ct]
    unit = "s"
    if throughput:
        b_items = [r["throughput"]["items_per_iter"] for r in base if r.get("throughput")] or [1.0]
        b_rounds = [b_items[0] / v for v in b_rounds]
        c_rounds = [b_items[0] / v for v in c_rounds]
        unit = next((r["throughput"]["unit"] for r in base if r.get("throughput")), "items/s")
    numbers = {
        "unit": unit,
        "baseline": statistics.median(b_rounds),
        "candidate": statistics.median(c_rounds),
    }
    if noise > NOISY_RELATIVE_IQR:
        return gate_result(
            gate,
            "inconclusive",
            f"too noisy to decide: relative IQR {noise:.1%} > {NOISY_RELATIVE_IQR:.0%}",
            **numbers,
        )
    assert gate.threshold is not None
    change = paired.judge_change(
        b_rounds,
        c_rounds,
        [s for t in bt for s in t["samples_s"]],
        [s for t in ct for s in t["samples_s"]],
        threshold=gate.threshold,
        alpha=policy.alpha,
        confidence=policy.confidence,
        higher_is_worse=not throughput,
        noise_floor=paired.noise_floor(b_rounds) if len(b_rounds) > 1 else None,
        resamples=policy.resamples,
    )
    return gate_result(
        gate,
        change.verdict,
        change.message,
        change=change.ratio.median - 1,
        ci=[change.ratio.ci_low - 1, change.ratio.ci_high - 1],
        p_value=change.test.p_value,
        **numbers,
    )


def _peaks(records: Sequence[Record]) -> list[int]:
    return [
        r["memory"]["peak_bytes"]
        for r in records
        if r.get("memory") and _effective_status(r) == "ok"
    ]


def memory_gate(
    gate: Gate, base: Sequence[Record], cand: Sequence[Record], comparable: bool
) -> dict[str, Any]:
    bp, cp = _peaks(base), _peaks(cand)
    if not bp or not cp:
        return gate_result(gate, "untested", "no peak-memory reading on both sides")
    if not comparable:
        return gate_result(
            gate, "not-comparable", "the two sides ran on different machines or images"
        )
    b, c = int(statistics.median(bp)), int(statistics.median(cp))
    numbers = {"unit": "B", "baseline": b, "candidate": c, "change": (c / b - 1) if b > 0 else None}
    growth = c - b
    rel = growth / b if b > 0 else float("inf") if growth > 0 else 0.0
    assert gate.threshold is not None
    text = f"peak {b / 2**20:.1f} MiB -> {c / 2**20:.1f} MiB"
    if abs(growth) <= gate.min_bytes:
        return gate_result(
            gate, "pass", f"{text}: within {gate.min_bytes / 2**20:.1f} MiB", **numbers
        )
    if rel > gate.threshold:
        return gate_result(gate, "fail", f"{text} ({rel:+.1%} > {gate.threshold:.0%})", **numbers)
    if rel < -gate.threshold:
        return gate_result(gate, "improved", f"{text} ({rel:+.1%})", **numbers)
    return gate_result(
        gate, "pass", f"{text} ({rel:+.1%}, threshold {gate.threshold:.0%})", **numbers
    )


def budget_gate(gate: Gate, cand: Sequence[Record]) -> dict[str, Any] | None:
    if gate.budget_bytes is None:
        return None
    cp = _peaks(cand)
    if not cp:
        return gate_result(gate, "untested", "no peak-memory reading on the candidate")
    peak = max(cp)
    verdict = "fail" if peak > gate.budget_bytes else "pass"
    return gate_result(
        gate,
        verdict,
        f"peak {peak / 2**20:.1f} MiB vs budget {gate.budget_bytes / 2**20:.1f} MiB",
        unit="B",
        candidate=peak,
        threshold=None,
    )


def evaluate_cell(
    policy: Policy, base: Sequence[Record], cand: Sequence[Record], comparable: bool
) -> list[dict[str, Any]]:
    """Every gate the policy names that applies to this cell, in the policy's order."""
    b_status, c_status = side_status(base), side_status(cand)
    c_failure = next((r["failure"] for r in cand if r.get("failure")), None) or {}
    c_msg = str(c_failure.get("message", "")).splitlines()[0][:300] if c_failure else ""
    dependency = all(
        (r.get("failure") or {}).get("mode") == "dependency" for r in [*base, *cand]
    ) and bool(base and cand)
    out: list[dict[str, Any]] = []
    status: dict[str, Any] | None = None
    for name, gate in policy.gates.items():
        result: dict[str, Any] | None
        if name == "status" or status is None:
            status = status_gate(gate, b_status, c_status, c_msg, dependency=dependency)
        if name == "status":
            result = status
        elif name == "correctness":
            result = correctness_gate(gate, base, cand, status)
        elif name in ("latency_p50", "latency_p95"):
            result = timing_gate(
                gate, policy, base, cand, stat=name.split("_")[1], comparable=comparable
            )
        elif name == "throughput":
            result = timing_gate(
                gate, policy, base, cand, stat="p50", throughput=True, comparable=comparable
            )
        elif name == "peak_memory":
            result = memory_gate(gate, base, cand, comparable)
        elif name == "memory_budget":
            result = budget_gate(gate, cand)
        else:
            result = extra_gate(gate, base, cand)
        if result is not None:
            out.append(result)
    return out


def extra_gate(gate: Gate, base: Sequence[Record], cand: Sequence[Record]) -> dict[str, Any] | None:
    """Gates fed by workload metrics (compile, export, determinism, ...) are registered here."""
    from suite.metric_gates import METRIC_GATES

    fn = METRIC_GATES.get(gate.name)
    return fn(gate, base, cand) if fn is not None else None
