"""The gates judged from a cell's status, accuracy, timing and memory: baseline records vs
candidate records, under a policy. suite/judge/registry.py registers them with the metric gates.

Every function returns plain data (a gate dict of the decision schema); nothing here renders.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import cast

from suite.core import accuracy
from suite.core.decision_records import GateRecord
from suite.core.records import AccuracyCheck, Verdict
from suite.core.results import disturbed
from suite.core.stats import throughput_of, timing_of
from suite.judge import memory, sequential
from suite.judge.policy import Gate
from suite.judge.round_metrics import LABELS, ROUND_METRICS, metric_value
from suite.judge.sequential import STEADY_STATE_GATES, Design
from suite.judge.verdicts import FAILED, Record, gate_result


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
    failure = record.get("failure")
    if record["status"] == "failed" and failure and failure["mode"] == "correctness":
        return "ok"
    return str(record["status"])


def status_gate(
    gate: Gate, base: str | None, cand: str | None, cand_msg: str, *, dependency: bool = False
) -> GateRecord:
    """dependency: both sides skipped the cell for an optional package missing here."""
    numbers = {"baseline": base, "candidate": cand}
    if base is None or cand is None:
        side = "baseline" if base is None else "candidate"
        return gate_result(gate, "untested", f"no result on the {side} side", **numbers)
    if dependency:
        # Neither pin can run it in this environment; which backend is tested is unaffected.
        return gate_result(gate, "unsupported", f"skipped on both pins: {cand_msg}", **numbers)
    if "skipped" in (base, cand):
        # One side could not run it (a package its environment lacks, say): nothing is known
        # of the candidate's torch here, either way.
        why = f": {cand_msg}" if cand_msg else ""
        where = (
            ""
            if base == cand
            else f" on the {'candidate' if cand == 'skipped' else 'baseline'} side"
        )
        return gate_result(
            gate, "untested", f"skipped{where} (baseline {base}, candidate {cand}){why}", **numbers
        )
    if base == "unsupported" and cand == "unsupported":
        return gate_result(gate, "unsupported", f"unsupported on both pins: {cand_msg}", **numbers)
    if base == "ok" and cand == "ok":
        return gate_result(gate, "pass", "ran on both pins", **numbers)
    if base == "ok":
        return gate_result(gate, "new-failure", f"candidate {cand}: {cand_msg}", **numbers)
    if cand == "ok":
        verdict: Verdict = "improved" if base == "unsupported" else "fixed"
        return gate_result(gate, verdict, f"baseline {base}, candidate runs", **numbers)
    return gate_result(
        gate,
        "untested",
        f"fails on both pins (baseline {base}, candidate {cand}): {cand_msg}",
        **numbers,
    )


def _checks(records: Sequence[Record]) -> list[AccuracyCheck]:
    for record in records:
        if correctness := record.get("correctness"):
            if checks := correctness.get("checks"):
                return list(checks)
            # A record without its checks: the cell's own figures are its one check.
            whole = {k: v for k, v in correctness.items() if k != "checks"}
            return [cast(AccuracyCheck, whole)]
    return []


def _judge_checks(checks: list[AccuracyCheck], gate: Gate) -> tuple[bool, AccuracyCheck | None]:
    """Re-judge stored RMSEs with the policy's tolerances; return (passed, worst failing check)."""
    worst: AccuracyCheck | None = None
    for check in checks:
        verdict = accuracy.judge(
            check["rmse_result"], check["rmse_reference"], check["dtype"], gate.tolerances
        )
        if not verdict.passed and worst is None:
            worst = {
                **check,
                "passed": verdict.passed,
                "rmse_result": verdict.rmse_result,
                "rmse_reference": verdict.rmse_reference,
                "k": verdict.k,
                "tol": verdict.tol,
            }
    return worst is None, worst


def correctness_gate(
    gate: Gate, base: Sequence[Record], cand: Sequence[Record], status: GateRecord
) -> GateRecord | None:
    if status["verdict"] not in ("pass", "fixed", "improved"):
        kept: Verdict = (
            status["verdict"] if status["verdict"] in ("untested", "unsupported") else "untested"
        )
        return gate_result(gate, kept, "no accuracy result to judge: " + status["message"])
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


# A process with fewer steady-state samples than this is flagged: its statistic rests on
# too little data to be stable.
MIN_SAMPLES = 20


def _ok(record: Record) -> bool:
    return _effective_status(record) == "ok"


def cold_compile_s(record: Record) -> float | None:
    """A cell's cold compile time: the compile workload's compile_cold_s, else the first call of
    a step any workload measured with ctx.measure(..., compiled=True)."""
    metric = (record.get("metrics") or {}).get("compile_cold_s") or {}
    value = metric.get("value")
    if not isinstance(value, (int, float)):
        value = (record.get("timing") or {}).get("compile_s")
    return float(value) if isinstance(value, (int, float)) else None


def _round_value(record: Record, gate: str) -> float | None:
    """The process statistic a gate pairs across sides: worse is larger, except throughput. A
    round another process disturbed (still, after its repeats) has none: it is left out, not
    averaged in."""
    if not _ok(record) or disturbed(record):
        return None
    if gate == "compile_time":
        value = cold_compile_s(record)
        return value if value is not None and value > 0 else None
    if gate in ROUND_METRICS:
        return metric_value(record, gate)
    if gate == "throughput":
        rate = throughput_of(record)
        return rate if rate else None
    summary = timing_of(record)  # from the raw samples, never the summary copied beside them
    if summary is None:
        return None
    value = summary["p95" if gate == "latency_p95" else "p50"]
    return float(value) if value > 0 else None


def paired_rounds(
    gate: str, base: Sequence[Record], cand: Sequence[Record]
) -> tuple[list[float], list[float], list[float]]:
    """(baseline values, candidate values, d) over the rounds both sides measured; d is the
    worse-positive log ratio of round i."""
    b = {r["round"]: v for r in base if (v := _round_value(r, gate)) is not None}
    c = {r["round"]: v for r in cand if (v := _round_value(r, gate)) is not None}
    rounds = sorted(b.keys() & c.keys())
    sign = -1.0 if gate == "throughput" else 1.0
    d = [sign * math.log(c[i] / b[i]) for i in rounds]
    return [b[i] for i in rounds], [c[i] for i in rounds], d


def timing_verdict(
    gate: Gate, base: Sequence[Record], cand: Sequence[Record], design: Design
) -> sequential.SequentialVerdict | None:
    """The sequential verdict of one timing gate, 'continue' while more rounds may come;
    None when the sides have no paired rounds to judge."""
    _, _, d = paired_rounds(gate.name, base, cand)
    if not d:
        return None
    assert gate.threshold is not None
    return sequential.judge(d, gate.threshold, design)


def _unpaired(records: Sequence[Record], side: str) -> str | None:
    """Why one side gave a timing gate no round: none ran, none ran ok, or every one stayed
    disturbed by another process."""
    if not records:
        return (
            f"no round ran on the {side} side (the time budget ran out first, or it never reported)"
        )
    statuses = sorted({str(r["status"]) for r in records if r["status"] != "ok"})
    ok = [r for r in records if r["status"] == "ok"]
    if not ok:
        return f"the {side} side did not run ok ({', '.join(statuses)})"
    if all(disturbed(r) for r in ok):
        repeats = sum(int(r.get("disturbed_repeats") or 0) for r in ok)
        return (
            f"every round of the {side} side stayed disturbed by another process "
            f"({len(ok)} round{'s' if len(ok) != 1 else ''}, rerun {repeats} times)"
        )
    return None


def _disturbed_text(base: Sequence[Record], cand: Sequence[Record]) -> str:
    """How many rounds ran again because another process disturbed them, and how many were
    left out still disturbed."""
    repeated = sum(int(r.get("disturbed_repeats") or 0) for r in base)
    left_out = len({r["round"] for r in [*base, *cand] if disturbed(r)})
    text = ""
    if repeated:
        text += f", {repeated} round{'s' if repeated != 1 else ''} rerun as disturbed"
    if left_out:
        text += f", {left_out} left out still disturbed"
    return text


def _low_samples(records: Sequence[Record]) -> int:
    return sum(
        1
        for r in records
        if (timing := r.get("timing"))
        and _ok(r)
        and len(timing.get("samples_s") or []) < MIN_SAMPLES
    )


def _relative_iqr(records: Sequence[Record]) -> float | None:
    values = [s["relative_iqr"] for r in records if _ok(r) and (s := timing_of(r)) is not None]
    return statistics.median(values) if values else None


def timing_gate(
    gate: Gate,
    base: Sequence[Record],
    cand: Sequence[Record],
    design: Design,
    *,
    comparable: bool = True,
) -> GateRecord | None:
    b_values, c_values, d = paired_rounds(gate.name, base, cand)
    if (
        gate.name == "compile_time"
        and not b_values
        and not any(cold_compile_s(r) for r in [*base, *cand])
    ):
        return None  # not a compile cell: the gate does not apply
    if gate.name in ROUND_METRICS and not any(metric_value(r, gate.name) for r in [*base, *cand]):
        return None  # the cell records no such figure
    if not d:
        said = [_unpaired(base, "baseline"), _unpaired(cand, "candidate")]
        why = "; ".join(w for w in said if w) or "no round measured this on both sides at once"
        return gate_result(gate, "untested", f"no paired timing rounds on both sides: {why}")
    if not comparable:
        return gate_result(
            gate, "not-comparable", "the two sides ran on different machines or images"
        )
    assert gate.threshold is not None
    verdict = sequential.settle(sequential.judge(d, gate.threshold, design))
    unit, baseline, candidate = "s", statistics.median(b_values), statistics.median(c_values)
    change, ci = verdict.change, verdict.ci
    if gate.name == "throughput":
        unit = next((tp["unit"] for r in base if (tp := r.get("throughput"))), "items/s")
        # d is worse-positive (a throughput drop); report the change of throughput itself.
        if verdict.log_mean is not None:
            change = sequential.ratio_change(-verdict.log_mean)
        if verdict.log_ci is not None:
            low, high = verdict.log_ci
            ci = (sequential.ratio_change(-high), sequential.ratio_change(-low))
    label = {"latency_p50": "p50", "latency_p95": "p95", "throughput": "throughput"}.get(
        gate.name, LABELS.get(gate.name, "cold compile")
    )
    text = f"{label} {_pct(change)}" if change is not None else label
    if ci is not None:
        text += f" (interval {_pct(ci[0])}..{_pct(ci[1])})"
    text += f", {verdict.rounds} round{'s' if verdict.rounds != 1 else ''}"
    if verdict.spread is not None:
        text += f", spread {verdict.spread:.1%}"
    rel = _relative_iqr([*base, *cand])
    if rel is not None and gate.name in STEADY_STATE_GATES:
        text += f", rel. IQR {rel:.1%}"
    text += _disturbed_text(base, cand)
    low = _low_samples(base) + _low_samples(cand)
    if low:
        text += f", {low} process{'es' if low > 1 else ''} below {MIN_SAMPLES} samples"
    return gate_result(
        gate,
        cast(Verdict, verdict.outcome),  # settled: never "continue"
        f"{text}: {verdict.why} (±{gate.threshold * 100:.1f}%)",
        unit=unit,
        baseline=baseline,
        candidate=candidate,
        change=change,
        ci=list(ci) if ci is not None else None,
        rounds=verdict.rounds,
        spread=verdict.spread,
        needed_rounds=verdict.needed_rounds,
        undecided=verdict.undecided,
    )


def _pct(x: float | None) -> str:
    return f"{x * 100:+.1f}%" if x is not None else "?"


def _peaks(records: Sequence[Record]) -> list[int]:
    return [
        memory["peak_bytes"]
        for r in records
        if (memory := r.get("memory")) and _effective_status(r) == "ok"
    ]


def memory_gate(
    gate: Gate, base: Sequence[Record], cand: Sequence[Record], comparable: bool
) -> GateRecord:
    """peak_memory from every ok round's reading on both sides (suite/judge/memory.py)."""
    return memory.memory_gate(gate, _peaks(base), _peaks(cand), comparable)


def budget_gate(gate: Gate, cand: Sequence[Record]) -> GateRecord | None:
    if gate.budget_bytes is None:
        return None
    cp = _peaks(cand)
    if not cp:
        return gate_result(gate, "untested", "no peak-memory reading on the candidate")
    peak = max(cp)
    within: Verdict = "fail" if peak > gate.budget_bytes else "pass"
    return gate_result(
        gate,
        within,
        f"peak {peak / 2**20:.1f} MiB vs budget {gate.budget_bytes / 2**20:.1f} MiB",
        unit="B",
        candidate=peak,
        threshold=None,
    )
