"""Compare two run directories under a policy and build the decision record."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from suite.core.backends import backend_names
from suite.core.errors import InputError
from suite.core.records import Cell
from suite.core.results import COUNTS_DIR, read_result, read_run_dir, utc_now
from suite.core.validation import validate
from suite.flows.repro import repro_record
from suite.judge.policy import Policy
from suite.judge.registry import evaluate_cell
from suite.judge.rules import apply_rules, overall
from suite.judge.sequential import Design

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


def comparable_fields() -> list[tuple[str, ...]]:
    devices = [("backends", b, f) for b in backend_names() for f in DEVICE_FIELDS]
    return [*HOST_FIELDS, *devices]


@dataclass
class LoadedRun:
    label: str
    dir: Path
    run: dict[str, Any]
    results: dict[str, list[dict[str, Any]]]  # cell id -> records by round
    counts: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # counting processes

    @classmethod
    def load(cls, run_dir: Path, label: str | None = None) -> LoadedRun:
        run, records = read_run_dir(run_dir)
        by_cell: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for record in sorted(records, key=lambda r: r["round"]):
            record["_run_dir"] = str(run_dir)  # drift reads the saved tensors beside the record
            by_cell[record["cell_id"]].append(record)
        counts: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for path in sorted((run_dir / COUNTS_DIR).glob("*~c[0-9]*.json")):
            record = read_result(path)
            record["_run_dir"] = str(run_dir)  # the per-function totals lie beside the record
            counts[record["cell_id"]].append(record)
        torch = run["environment"]["torch"]["version"]
        label = label or run.get("label") or f"torch {torch}"
        return cls(label, run_dir, run, dict(by_cell), dict(counts))

    def evidence(self) -> dict[str, Any]:
        env = self.run["environment"]
        return {
            "label": self.label,
            "run_id": self.run["run_id"],
            "torch": env["torch"]["version"],
            "git_version": env["torch"].get("git_version"),
            "dir": str(self.dir),
            "interpreter": self.run.get("interpreter"),
            # What prepared the side knew (recipe, suite, tag) over what the worker saw.
            "image": self.run.get("image") or env.get("image"),
            "rounds": max((len(v) for v in self.results.values()), default=0),
        }


def _field(env: dict[str, Any], path: tuple[str, ...]) -> Any:
    value: Any = env
    for key in path:
        value = value.get(key) if isinstance(value, dict) else None
    return value


def differences(base: dict[str, Any], cand: dict[str, Any]) -> list[dict[str, Any]]:
    """What other than torch differs between the two environments."""
    out = []
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


def not_comparable(diffs: Sequence[Mapping[str, Any]]) -> str:
    """The reason two sides' environments make their timings incomparable."""
    return "not comparable: " + ", ".join(dict.fromkeys(d["field"] for d in diffs)) + " differ"


def decide(
    base: LoadedRun,
    cand: LoadedRun,
    policy: Policy,
    *,
    artifacts: dict[str, dict[str, str]] | None = None,
    extra_cells: Sequence[Cell] | None = None,
    rollback: dict[str, Any] | None = None,
) -> dict[str, Any]:
    _check_same_matrix(base, cand)
    diffs = differences(base.run["environment"], cand.run["environment"])
    comparable = not diffs
    mismatches = []
    for side in (base, cand):
        captured = (side.run.get("policy") or {}).get("sha256")
        if captured and captured != policy.sha256:
            mismatches.append(
                f"{side.label} ({side.run['run_id']}) was captured under policy {captured[:12]}, "
                f"judged under {policy.sha256[:12]}"
            )
    design = design_of(base, cand, policy)
    sides = {"baseline": (base.dir, base.run), "candidate": (cand.dir, cand.run)}
    # Sides that sit side by side (an ab folder, a CI job's artifact) are reproduced from there.
    root = base.dir.parent.absolute() if base.dir.parent == cand.dir.parent else None
    cells = []
    ids = list(dict.fromkeys([*base.results, *cand.results]))
    for cell_id in ids:
        b, c = base.results.get(cell_id, []), cand.results.get(cell_id, [])
        spec = (c or b)[0]["spec"]
        counts = (base.counts.get(cell_id, []), cand.counts.get(cell_id, []))
        gates = evaluate_cell(policy, b, c, comparable, design, counts)
        failing = {g["gate"] for g in gates if g["verdict"] in ("fail", "new-failure")}
        cells.append(
            {
                "cell_id": cell_id,
                "row_id": f"{spec['workload']}@{spec['backend']}",
                "workload": spec["workload"],
                "backend": spec["backend"],
                "lane": spec["lane"],
                "baseline_status": b[0]["status"] if b else None,
                "candidate_status": c[0]["status"] if c else None,
                "gates": gates,
                "repro": repro_record(sides, cell_id, c[0] if c else None, failing, root)
                if failing
                else None,
                "artifacts": (artifacts or {}).get(cell_id, {}),
            }
        )
    # Checks that are not cells of the matrix (the rollback gate) join as cells of their own.
    cells.extend(
        cast(dict[str, Any], c)
        for c in extra_cells or []
        if all(g["gate"] in policy.gates for g in c["gates"])
    )
    return decision_record(
        policy,
        cells,
        matrix=base.run["matrix"],
        baseline=base.evidence(),
        candidate=cand.evidence(),
        differences=diffs,
        mismatches=mismatches,
        rollback=rollback,
    )


def decision_record(
    policy: Policy,
    cells: list[dict[str, Any]],
    *,
    matrix: dict[str, Any],
    baseline: dict[str, Any],
    candidate: dict[str, Any],
    differences: Sequence[dict[str, Any]],
    mismatches: Sequence[str],
    notes: Sequence[str] = (),
    rollback: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """decision.json, built here alone (compare, ab and aggregate): the policy's rules applied to
    the cells, the overall decision, and its reasons, then schema-checked."""
    rows = apply_rules(policy, cells)
    decision, reasons = overall(rows, cells)
    if differences:
        reasons.append(not_comparable(differences))
    reasons.extend(mismatches)
    reasons.extend(notes)
    doc: dict[str, Any] = {
        "kind": "torch-matrix/decision",
        "schema_version": 1,
        "decision": decision,
        "reasons": reasons,
        "generated_at": utc_now(),
        "matrix": matrix,
        "policy": {**policy.evidence(), "mismatches": list(mismatches)},
        "baseline": baseline,
        "candidate": candidate,
        "comparable": {"ok": not differences, "differences": list(differences)},
        "rows": rows,
        "cells": cells,
    }
    if rollback is not None:
        doc["rollback"] = rollback
    validate(doc, "torch-matrix/decision", file="<decision>")
    return doc
