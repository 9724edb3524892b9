"""The scaling gate: how each pin's throughput scales with the world.

The cells of one distributed case at different worlds (fsdp2.true.d256.n1x2,
fsdp2.true.d256.n2x2) form a scaling row. A pin's efficiency at world W is its per-rank
throughput at W over the per-rank throughput at the row's smallest world W0. The gate compares
the candidate's efficiency with the baseline's, round by round: in round r,

    d_r = -log(eff_cand_r / eff_base_r)
        = -log(tp_cand(W)_r / tp_base(W)_r) + log(tp_cand(W0)_r / tp_base(W0)_r)

(worse-positive; the world sizes cancel), judged by the same sequential test and policy
threshold as the timing gates, so that its fail and pass hold at the design's error rates.
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Mapping, Sequence
from typing import cast

from suite.core.decision_records import Cell, GateRecord
from suite.core.records import Verdict
from suite.core.results import disturbed
from suite.core.stats import throughput_of
from suite.judge import sequential
from suite.judge.policy import Gate, Policy
from suite.judge.sequential import Design
from suite.judge.verdicts import Record, gate_result, row_id_of

_WORLD_TOKEN = re.compile(r"\.n(\d+)x(\d+)(?=@)")


def scaling_key(cell_id: str) -> tuple[str, int] | None:
    """(the cell id without its world, the world size) of a distributed cell; None otherwise."""
    found = _WORLD_TOKEN.search(cell_id)
    if found is None:
        return None
    nodes, ranks = int(found.group(1)), int(found.group(2))
    return cell_id[: found.start()] + cell_id[found.end() :], nodes * ranks


def _rates(records: Sequence[Record]) -> dict[int, float]:
    """Each round's throughput, for the rounds that ran ok and undisturbed."""
    return {
        int(r["round"]): rate
        for r in records
        if r["status"] == "ok" and not disturbed(r) and (rate := throughput_of(r))
    }


def scaling_cells(
    policy: Policy,
    base: Mapping[str, Sequence[Record]],
    cand: Mapping[str, Sequence[Record]],
    design: Design,
    comparable: bool,
) -> list[Cell]:
    """One cell per scaling row and larger world, judged by the policy's scaling gate; none
    where the policy has no such gate or no case ran at two worlds."""
    gate = policy.gates.get("scaling")
    if gate is None:
        return []
    rows: dict[str, dict[int, str]] = {}
    for cell_id in dict.fromkeys([*base, *cand]):
        key = scaling_key(cell_id)
        if key is not None:
            rows.setdefault(key[0], {})[key[1]] = cell_id
    cells = []
    for worlds in rows.values():
        if len(worlds) < 2:
            continue
        smallest = min(worlds)
        for size in sorted(worlds)[1:]:
            first, other = worlds[smallest], worlds[size]
            record = gate_of(gate, base, cand, first, other, design, comparable)
            sample = [*cand.get(other, ()), *base.get(other, ())][0]
            cells.append(_cell(first, other, sample, record))
    return cells


def gate_of(
    gate: Gate,
    base: Mapping[str, Sequence[Record]],
    cand: Mapping[str, Sequence[Record]],
    first: str,
    other: str,
    design: Design,
    comparable: bool,
) -> GateRecord:
    """The scaling verdict of world OTHER over world FIRST."""
    world = f"{_tag(other)} over {_tag(first)}"
    rates = {
        (side, cell): _rates(runs.get(cell, []))
        for side, runs in (("b", base), ("c", cand))
        for cell in (first, other)
    }
    rounds = sorted(set.intersection(*(set(r) for r in rates.values())))
    if not rounds:
        empty = [f"{s}:{_tag(c)}" for (s, c), r in rates.items() if not r]
        said = ", ".join(e.replace("b:", "baseline ").replace("c:", "candidate ") for e in empty)
        return gate_result(
            gate, "untested",
            f"efficiency at {world}: no round measured both worlds on both sides"
            + (f" (none from {said})" if said else ""),
        )  # fmt: skip
    if not comparable:
        return gate_result(gate, "not-comparable", "the two sides ran on different machines")
    eff_b = [rates["b", other][r] / rates["b", first][r] for r in rounds]
    eff_c = [rates["c", other][r] / rates["c", first][r] for r in rounds]
    size_ratio = _size(first) / _size(other)  # per-rank throughput: tp / world
    d = [-math.log(c / b) for b, c in zip(eff_b, eff_c, strict=True)]
    assert gate.threshold is not None
    verdict = sequential.settle(sequential.judge(d, gate.threshold, design))
    base_eff = statistics.median(eff_b) * size_ratio
    cand_eff = statistics.median(eff_c) * size_ratio
    change = sequential.ratio_change(-verdict.log_mean) if verdict.log_mean is not None else None
    ci = None
    if verdict.log_ci is not None:
        low, high = verdict.log_ci
        ci = [sequential.ratio_change(-high), sequential.ratio_change(-low)]
    text = f"efficiency at {world}: baseline {base_eff:.2f}, candidate {cand_eff:.2f}"
    if change is not None:
        text += f" ({change:+.1%}"
        text += f", interval {ci[0]:+.1%}..{ci[1]:+.1%})" if ci else ")"
    text += f", {verdict.rounds} round{'s' if verdict.rounds != 1 else ''}"
    return gate_result(
        gate,
        cast(Verdict, verdict.outcome),
        f"{text}: {verdict.why} (±{gate.threshold * 100:.1f}%)",
        unit="efficiency",
        baseline=base_eff,
        candidate=cand_eff,
        change=change,
        ci=ci,
        rounds=verdict.rounds,
        spread=verdict.spread,
        needed_rounds=verdict.needed_rounds,
        undecided=verdict.undecided,
    )


def _tag(cell_id: str) -> str:
    found = _WORLD_TOKEN.search(cell_id)
    return found.group(0)[1:] if found else "?"


def _size(cell_id: str) -> int:
    key = scaling_key(cell_id)
    return key[1] if key else 1


def _cell(first: str, other: str, sample: Record, gate: GateRecord) -> Cell:
    spec = sample["spec"]
    case, backend = other.rsplit("@", 1)
    cell_id = f"scaling.{case}-over-{_tag(first)}@{backend}"
    return {
        "cell_id": cell_id, "row_id": row_id_of(spec), "workload": spec["workload"],
        "backend": backend, "lane": spec["lane"], "baseline_status": None,
        "candidate_status": None, "gates": [gate], "repro": None, "artifacts": {},
    }  # fmt: skip
