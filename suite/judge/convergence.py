"""The convergence gate: a training curve on the candidate against the same seeded curve on the
baseline. A workload records its loss at each step (`ctx.loss_curve(values)`, and optionally the
same run in fp64 as `reference=`); the gate compares the two pins' curves point by point.

Fail when the largest pointwise relative difference, |c_i - b_i| / max(|b_i|, tiny), exceeds
the policy's threshold, unless an fp64 reference curve bounds both: then the candidate fails
only if it is also further from the reference than twice the baseline's distance (as the
correctness gate's k=2 rule), since a pin that rounds differently but no worse has not diverged.
Improved never applies: a curve is right, not better. Each side's first round with a curve is
read; the seeded curve repeats from round to round."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from suite.core.decision_records import GateRecord
from suite.judge.policy import Gate
from suite.judge.verdicts import Record, gate_result

TINY = 1e-12
K = 2.0  # how much further from the fp64 curve the candidate may be than the baseline


def _curve(records: Sequence[Record]) -> dict[str, Any] | None:
    for record in records:
        curve = record.get("loss_curve")
        if curve and curve.get("values"):
            return dict(curve)
    return None


def _floats(values: Sequence[Any]) -> list[float]:
    """A record's curve: null marks a step whose loss was NaN or infinite."""
    return [math.nan if x is None else float(x) for x in values]


def _largest_gap(base: Sequence[float], cand: Sequence[float]) -> tuple[float, int]:
    gaps = [abs(c - b) / max(abs(b), TINY) for b, c in zip(base, cand, strict=True)]
    step = max(range(len(gaps)), key=gaps.__getitem__)
    return gaps[step], step


def _distance(values: Sequence[float], reference: Sequence[float]) -> float:
    return max(abs(v - r) for v, r in zip(values, reference, strict=True))


def convergence_gate(
    gate: Gate, base: Sequence[Record], cand: Sequence[Record]
) -> GateRecord | None:
    b, c = _curve(base), _curve(cand)
    if b is None and c is None:
        return None  # the workload records no curve
    if b is None or c is None:
        side = "baseline" if b is None else "candidate"
        return gate_result(gate, "untested", f"no loss curve on the {side} side")
    bv, cv = _floats(b["values"]), _floats(c["values"])
    numbers = {"baseline": bv[-1], "candidate": cv[-1], "unit": "loss"}
    if len(bv) != len(cv):
        return gate_result(
            gate, "untested", f"curves of different lengths ({len(bv)} and {len(cv)} steps)",
            **numbers,
        )  # fmt: skip
    if not all(math.isfinite(x) for x in bv):
        return gate_result(gate, "untested", "the baseline's curve is not finite", **numbers)
    change = (cv[-1] - bv[-1]) / max(abs(bv[-1]), TINY)
    numbers["change"] = change if math.isfinite(change) else None
    if not all(math.isfinite(x) for x in cv):
        step = next(i for i, x in enumerate(cv) if not math.isfinite(x))
        return gate_result(
            gate, "fail", f"the candidate's loss is {cv[step]} at step {step}", **numbers
        )
    gap, step = _largest_gap(bv, cv)
    where = (
        f"largest step difference {gap * 100:.3g}% at step {step} ({bv[step]:.6g} → {cv[step]:.6g})"
    )
    final = f"final loss {bv[-1]:.6g} → {cv[-1]:.6g}"
    threshold = gate.threshold if gate.threshold is not None else 0.0
    if gap <= threshold:
        return gate_result(gate, "pass", f"{final}; {where}, within {threshold:.3g}", **numbers)
    reference = b.get("reference") or c.get("reference")
    if reference and len(reference) == len(bv):
        ref = _floats(reference)
        base_far, cand_far = _distance(bv, ref), _distance(cv, ref)
        if cand_far <= K * base_far + TINY:
            return gate_result(
                gate, "pass",
                f"{final}; {where}, but no further from the fp64 curve than {K:g}x the "
                f"baseline ({cand_far:.3g} vs {base_far:.3g})",
                **numbers,
            )  # fmt: skip
    return gate_result(gate, "fail", f"{final}; {where}, beyond {threshold:.3g}", **numbers)
