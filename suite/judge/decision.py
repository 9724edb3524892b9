"""The decision: two loaded runs judged under a policy, cell by cell, then row by row, into the
decision record (decision.json) — built here alone, for compare, ab and aggregate. How a failing
cell is reproduced is the caller's to say (flows/compare.py gives the command lines)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from suite.core.backends import backend_names
from suite.core.decision_records import (
    Cell,
    Comparable,
    DecisionRecord,
    Difference,
    PackageDifference,
    Repro,
    RollbackRecord,
    SideEvidence,
)
from suite.core.errors import InputError
from suite.core.loaded import LoadedRun
from suite.core.records import MatrixEvidence, Result
from suite.core.results import disturbed, utc_now
from suite.core.validation import validate
from suite.judge.missing import excused_gates, missing_gates, required_rows
from suite.judge.models import add_identity, model_differences, models_line
from suite.judge.packages import held_by_policy, package_differences, packages_line
from suite.judge.policy import Policy, decision_rank
from suite.judge.registry import evaluate_cell
from suite.judge.rules import apply_rules, overall
from suite.judge.scaling import scaling_cells
from suite.judge.second_look import alone_design, alone_records, needs_second_look, second_look
from suite.judge.sequential import Design
from suite.judge.verdicts import row_id_of

# Fields of the environment record that must match for timing and memory to be comparable;
# and, for every registered backend, whether it is there, on which devices, under which driver.
HOST_FIELDS = (
    ("cpu", "model"),
    ("cpu", "logical_cores"),
    ("memory_total_bytes",),
    ("os", "system"),
    ("python",),
)
DEVICE_FIELDS = ("available", "devices", "driver")

# How a failing cell is reproduced: (cell id, the candidate's first record, the failing gates).
Reproducer = Callable[[str, "Result | None", set[str]], "Repro | None"]


def comparable_fields() -> list[tuple[str, ...]]:
    devices = [("backends", b, f) for b in backend_names() for f in DEVICE_FIELDS]
    return [*HOST_FIELDS, *devices]


def _field(env: Mapping[str, Any], path: tuple[str, ...]) -> Any:
    value: Any = env
    for key in path:
        value = value.get(key) if isinstance(value, dict) else None
    return value


def differences(base: Mapping[str, Any], cand: Mapping[str, Any]) -> list[Difference]:
    """What other than torch differs between the two environments."""
    out: list[Difference] = []
    for path in comparable_fields():
        b, c = _field(base, path), _field(cand, path)
        if b != c:
            out.append({"field": ".".join(path), "baseline": b, "candidate": c})
    b_img, c_img = base.get("image") or {}, cand.get("image") or {}
    if b_img.get("base") != c_img.get("base"):
        out.append(
            {"field": "image.base", "baseline": b_img.get("base"), "candidate": c_img.get("base")}
        )
    return out


def _check_same_matrix(base: LoadedRun, cand: LoadedRun) -> None:
    if (
        base.run["matrix"]["sha256"] != cand.run["matrix"]["sha256"]
        or base.run["profile"] != cand.run["profile"]
    ):
        raise InputError(
            "the runs come from different matrices or profiles "
            f"({base.run['matrix']['name']} {base.run['profile']} vs "
            f"{cand.run['matrix']['name']} {cand.run['profile']}); compare runs of the same matrix",
            file=str(cand.dir / "run.json"),
            path="$.matrix.sha256",
        )


def design_of(base: LoadedRun, cand: LoadedRun, policy: Policy) -> Design:
    """The sequential design the rounds ran under: an A/B records it; runs made apart
    (`run --rounds N` on each side) are judged as a fixed design with one look at their
    common round count."""
    recorded = (base.run.get("ab") or {}).get("design")
    if recorded:
        return Design.from_dict(recorded)
    rounds = min((len(v) for side in (base, cand) for v in side.results.values()), default=1)
    return policy.design.fixed(max(1, rounds))


SHORTFALL = "--rounds "  # how a line of rounds_shortfall begins


def rounds_shortfall(base: LoadedRun, cand: LoadedRun, design: Design) -> list[str]:
    """An A/B of fixed rounds (`--rounds N`) whose cells judged fewer: one line saying how many
    cells, and the fewest rounds judged. A round that stayed disturbed is left out, and a cell
    that failed or was skipped on a side has no rounds to judge."""
    if len(design.looks) != 1 or not (base.run.get("ab") or {}).get("design"):
        return []  # the policy's looks: rounds stop where the gates decided, by design
    asked = design.looks[0]
    judged = []
    for cell_id in dict.fromkeys([*base.results, *cand.results]):
        counts = [
            sum(
                1 for r in side.results.get(cell_id, []) if r["status"] == "ok" and not disturbed(r)
            )
            for side in (base, cand)
        ]
        if all(
            r["status"] == "ok" for side in (base, cand) for r in side.results.get(cell_id, [])[:1]
        ):
            judged.append(min(counts))
    short = [n for n in judged if n < asked]
    if not short:
        return []
    return [
        f"{SHORTFALL}{asked} asked for {asked} paired rounds; {len(short)} of {len(judged)} cells "
        f"that ran judged fewer (as few as {min(short)}): a round that stayed disturbed by "
        "another process, or failed, is left out"
    ]


def not_comparable(diffs: Sequence[Difference]) -> str:
    """The reason two sides' environments make their timings incomparable."""
    return "not comparable: " + ", ".join(dict.fromkeys(d["field"] for d in diffs)) + " differ"


def _policy_mismatches(base: LoadedRun, cand: LoadedRun, policy: Policy) -> list[str]:
    mismatches = []
    for side in (base, cand):
        captured = (side.run.get("policy") or {}).get("sha256")
        if captured and captured != policy.sha256:
            mismatches.append(
                f"{side.label} ({side.run['run_id']}) was captured under policy {captured[:12]}, "
                f"judged under {policy.sha256[:12]}"
            )
    return mismatches


def judge_cells(
    base: LoadedRun,
    cand: LoadedRun,
    policy: Policy,
    comparable: bool,
    reproduce: Reproducer,
    artifacts: Mapping[str, dict[str, str]],
) -> list[Cell]:
    """Every cell either side ran, with its gates' verdicts, in the runs' order."""
    design = design_of(base, cand, policy)
    design_alone = alone_design(base, policy)
    cells: list[Cell] = []
    for cell_id in dict.fromkeys([*base.results, *cand.results]):
        b, c = base.results.get(cell_id, []), cand.results.get(cell_id, [])
        spec = (c or b)[0]["spec"]
        counts = (base.counts.get(cell_id, []), cand.counts.get(cell_id, []))
        gates = evaluate_cell(policy, b, c, comparable, design, counts, (base.dir, cand.dir))
        if needs_second_look(gates):
            alone = alone_records(base, cand, cell_id)
            gates = second_look(policy, gates, alone, design_alone, comparable)
        failing = {g["gate"] for g in gates if g["verdict"] in ("fail", "new-failure")}
        cell: Cell = {
            "cell_id": cell_id,
            "row_id": row_id_of(spec),
            "workload": spec["workload"],
            "backend": spec["backend"],
            "lane": spec["lane"],
            "baseline_status": b[0]["status"] if b else None,
            "candidate_status": c[0]["status"] if c else None,
            "gates": gates,
            "repro": reproduce(cell_id, c[0] if c else None, failing) if failing else None,
            "artifacts": artifacts.get(cell_id, {}),
        }
        add_identity(cell, b, c)
        cells.append(cell)
    return cells


def decision_of(
    base: LoadedRun,
    cand: LoadedRun,
    policy: Policy,
    *,
    reproduce: Reproducer = lambda cell_id, record, failing: None,
    artifacts: Mapping[str, dict[str, str]] | None = None,
    extra_cells: Sequence[Cell] | None = None,
    rollback: RollbackRecord | None = None,
) -> DecisionRecord:
    _check_same_matrix(base, cand)
    diffs = differences(base.run["environment"], cand.run["environment"])
    cells = judge_cells(base, cand, policy, not diffs, reproduce, artifacts or {})
    design = design_of(base, cand, policy)
    cells.extend(scaling_cells(policy, base.results, cand.results, design, not diffs))
    # Checks that are not cells of the matrix (the rollback gate) join as cells of their own.
    cells.extend(c for c in extra_cells or [] if all(g["gate"] in policy.gates for g in c["gates"]))
    return decision_record(
        policy,
        cells,
        matrix=base.run["matrix"],
        baseline=base.evidence(),
        candidate=cand.evidence(),
        differences=diffs,
        mismatches=_policy_mismatches(base, cand, policy),
        rollback=rollback,
        packages=package_differences(base, cand),
        notes=[models_line(m)] if (m := model_differences(base, cand)) else [],
        lead=rounds_shortfall(base, cand, design),
    )


def decision_record(
    policy: Policy,
    cells: list[Cell],
    *,
    matrix: MatrixEvidence,
    baseline: SideEvidence,
    candidate: SideEvidence,
    differences: Sequence[Difference],
    mismatches: Sequence[str],
    notes: Sequence[str] = (),
    rollback: RollbackRecord | None = None,
    unreported: Sequence[str] = (),
    packages: Sequence[PackageDifference] = (),
    lead: Sequence[str] = (),
) -> DecisionRecord:
    """decision.json, built here alone (compare, ab and aggregate): the policy's rules applied to
    the cells, the overall decision, and its reasons, then schema-checked. unreported: what was
    planned and never reported (a bench job, a cell); the decision is then at least defer,
    whatever the policy says of the untested cells, and those lines come first."""
    rows = apply_rules(policy, cells)
    decision, reasons = overall(rows, cells)
    missing = missing_gates(policy, cells)
    if missing and decision == "adopt":
        decision = "defer"  # an adopt would claim gates that were never decided
        reasons = [*missing, *reasons]
    lacking = required_rows(policy, cells)
    if lacking:  # a row the profile cannot decide without: never adopt or isolate
        if decision_rank(decision) < decision_rank("defer"):
            decision = "defer"
        reasons = [*lacking, *reasons]
    if unreported:
        if decision_rank(decision) < decision_rank("defer"):
            decision = "defer"
        reasons = [*unreported, *reasons]
    if differences:
        reasons.append(not_comparable(differences))
    if packages:
        held = held_by_policy(packages, policy.same_packages)
        if held and decision_rank(decision) < decision_rank("defer"):
            decision = "defer"
        if held:
            reasons.insert(
                0, f"{', '.join(held)} must be the same on both sides (the profile's same_packages)"
            )
        reasons.append(packages_line(packages))
    reasons.extend(mismatches)
    reasons.extend(excused_gates(policy, cells))
    reasons.extend(notes)
    reasons[:0] = lead  # what the run could not do as asked, before what follows from it
    comparable: Comparable = {"ok": not differences, "differences": list(differences)}
    if packages:
        comparable["packages"] = list(packages)
    doc: DecisionRecord = {
        "kind": "torch-matrix/decision",
        "schema_version": 1,
        "decision": decision,
        "reasons": reasons,
        "generated_at": utc_now(),
        "matrix": matrix,
        "policy": {**policy.evidence(), "mismatches": list(mismatches)},
        "baseline": baseline,
        "candidate": candidate,
        "comparable": comparable,
        "rows": rows,
        "cells": cells,
    }
    if rollback is not None:
        doc["rollback"] = rollback
    validate(doc, "torch-matrix/decision", file="<decision>")
    return doc
