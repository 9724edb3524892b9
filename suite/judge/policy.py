"""Policies: gates, thresholds and decision rules, loaded, checked and hashed before a run."""

from __future__ import annotations

import fnmatch
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import TypedDict

from suite.core.decision_records import PolicyEvidence
from suite.core.errors import InputError
from suite.core.records import DECISIONS, Decision, Severity
from suite.core.validation import load_spec_document, validate
from suite.core.yamlsafe import load_yaml
from suite.judge.sequential import DEFAULT_FAIL_LEVEL, DEFAULT_LOOKS, DEFAULT_PASS_LEVEL, Design

DEFAULT_POLICY_NAME = "<built-in default policy>"


def decision_rank(decision: Decision) -> int:
    return DECISIONS.index(decision)


def worst(decisions: Sequence[Decision]) -> Decision:
    """The worst of one or more decisions. Nothing decided is no decision: an empty list is
    a caller's error, never a silent adopt."""
    if not decisions:
        raise ValueError("worst() of no decisions")
    return max(decisions, key=decision_rank)


@dataclass(frozen=True)
class Gate:
    name: str
    severity: Severity
    threshold: float | None = None
    required: bool = False
    min_bytes: int = 0
    budget_bytes: int | None = None
    must_not_grow: bool = False
    paths: tuple[str, ...] = ()
    tolerances: dict[str, tuple[float, float]] | None = None
    relative_tolerance: dict[str, float] | None = None
    allow: bool = False  # fallback gate: ops that ran on the CPU are allowed
    # True: no cell need decide it; gate names: no cell need decide it where one of those did.
    may_be_missing: bool | tuple[str, ...] = False


@dataclass(frozen=True)
class Rule:
    decision: Decision
    verdicts: tuple[str, ...]
    severity: str | None = None
    gate: str | None = None
    fleet: bool | None = None
    required: bool | None = None
    lane: str | None = None
    reason: str = ""

    def matches(self, gate: Gate, verdict: str, *, fleet: bool, lane: str) -> bool:
        return (
            verdict in self.verdicts
            and (self.severity is None or self.severity == gate.severity)
            and (self.gate is None or self.gate == gate.name)
            and (self.fleet is None or self.fleet == fleet)
            and (self.required is None or self.required == gate.required)
            and (self.lane is None or self.lane == lane)
        )


@dataclass(frozen=True)
class Policy:
    file: str
    sha256: str
    profile: str
    fleet_backends: tuple[str, ...]
    gates: dict[str, Gate]
    rules: tuple[Rule, ...]
    isolatable: tuple[str, ...]
    design: Design
    # Libraries (fnmatch on normalized names) that must be the same on both sides: a
    # difference defers (suite/judge/packages.py).
    same_packages: tuple[str, ...] = ()
    # Rows (fnmatch on the workload or 'workload@backend') that must have evidence on the
    # fleet's backends, else the decision is defer (suite/judge/missing.py).
    requires: tuple[str, ...] = ()

    def is_isolatable(self, workload: str, backend: str) -> bool:
        row = f"{workload}@{backend}"
        return any(
            fnmatch.fnmatchcase(row, p) or fnmatch.fnmatchcase(workload, p) for p in self.isolatable
        )

    def evidence(self) -> PolicyEvidence:
        return {
            "file": self.file,
            "sha256": self.sha256,
            "profile": self.profile,
            "fleet_backends": list(self.fleet_backends),
            **({"requires": list(self.requires)} if self.requires else {}),
        }


class GateDoc(TypedDict, total=False):
    """A gate as a policy file writes it (policy.schema.json's $defs.gate)."""

    severity: Severity
    threshold: float | None
    required: bool
    min_bytes: int
    budget_bytes: int | None
    must_not_grow: bool
    paths: list[str]
    relative_tolerance: dict[str, float] | None
    allow: bool
    tolerances: dict[str, list[float]] | None
    may_be_missing: bool | list[str]


class RuleDoc(TypedDict, total=False):
    decision: Decision
    verdicts: list[str]
    severity: str | None
    gate: str | None
    fleet: bool | None
    required: bool | None
    lane: str | None
    reason: str


class StatisticsDoc(TypedDict, total=False):
    looks: list[int]
    fail_level: float
    pass_level: float
    budget_s: float | None


class ProfileDoc(TypedDict, total=False):
    description: str
    fleet_backends: list[str]
    gates: dict[str, GateDoc]
    isolatable: list[str]
    same_packages: list[str]
    requires: list[str]
    rules: list[RuleDoc]
    statistics: StatisticsDoc


# Every gate the suite computes, and the fields each needs beyond its severity. The schema
# cannot say this (one shape serves every gate), so load_policy checks it before any cell runs.
GATE_NEEDS: dict[str, tuple[str, ...]] = {
    "status": (),
    "correctness": (),
    "latency_p50": ("threshold",),
    "latency_p95": ("threshold",),
    "throughput": ("threshold",),
    "compile_time": ("threshold",),
    "checkpoint_save": ("threshold",),
    "checkpoint_load": ("threshold",),
    "recovery": ("threshold",),
    "comm_exposed": ("threshold",),
    "peak_memory": ("threshold",),
    "memory_budget": (),
    "graph_breaks": (),
    "recompiles": (),
    "export": (),
    "determinism": (),
    "drift": (),
    "convergence": ("threshold",),
    "scaling": ("threshold",),
    "rollback": (),
    "instructions": ("threshold",),
    "fallback": (),
}


def _check_gates(raw: ProfileDoc, rules: list[RuleDoc], file: str, where: str) -> None:
    """What a schema-valid profile can still get wrong: a gate the suite does not compute, a
    field a gate needs, a rule naming a gate the profile lacks."""
    gates = raw["gates"]
    for name, fields in gates.items():
        if name not in GATE_NEEDS:
            raise InputError(
                f"no gate {name!r} exists; the gates are {', '.join(GATE_NEEDS)}",
                file=file,
                path=f"{where}.gates.{name}",
            )
        for needed in GATE_NEEDS[name]:
            if fields.get(needed) is None:
                raise InputError(
                    f"the {name} gate needs a {needed} (a relative change, e.g. 0.05 for 5%)",
                    file=file,
                    path=f"{where}.gates.{name}.{needed}",
                )
        if name in ("graph_breaks", "recompiles") or "must_not_grow" not in fields:
            continue
        raise InputError(
            "must_not_grow applies to the graph_breaks and recompiles gates only",
            file=file,
            path=f"{where}.gates.{name}.must_not_grow",
        )
    for i, rule in enumerate(rules):
        if rule.get("gate") is not None and rule["gate"] not in gates:
            raise InputError(
                f"the rule names gate {rule['gate']!r}, which this profile does not have",
                file=file,
                path=f"{where}.rules[{i}].gate",
            )


def _gate(name: str, raw: GateDoc) -> Gate:
    tolerances = raw.get("tolerances")
    return Gate(
        name=name,
        severity=raw["severity"],
        threshold=raw.get("threshold"),
        required=bool(raw.get("required", False)),
        min_bytes=int(raw.get("min_bytes", 0)),
        budget_bytes=raw.get("budget_bytes"),
        # Growth fails unless the policy says must_not_grow: false.
        must_not_grow=bool(raw.get("must_not_grow", name in ("graph_breaks", "recompiles"))),
        paths=tuple(raw.get("paths", ())),
        relative_tolerance=raw.get("relative_tolerance"),
        allow=bool(raw.get("allow", False)),
        may_be_missing=_may_be_missing(raw.get("may_be_missing", False)),
        tolerances={k: (float(v[0]), float(v[1])) for k, v in tolerances.items()}
        if tolerances
        else None,
    )


def _may_be_missing(raw: bool | list[str]) -> bool | tuple[str, ...]:
    return raw if isinstance(raw, bool) else tuple(raw)


def _rule(raw: RuleDoc) -> Rule:
    return Rule(
        decision=raw["decision"],
        verdicts=tuple(raw["verdicts"]),
        severity=raw.get("severity"),
        gate=raw.get("gate"),
        fleet=raw.get("fleet"),
        required=raw.get("required"),
        lane=raw.get("lane"),
        reason=raw.get("reason", ""),
    )


def default_policy_text() -> str:
    return resources.files("suite.data").joinpath("default-policy.yaml").read_text("utf-8")


def load_policy(path: Path | None, profile: str | None) -> Policy:
    if path is None:
        text = default_policy_text()
        doc, file, digest = (
            load_yaml(text),
            DEFAULT_POLICY_NAME,
            hashlib.sha256(text.encode()).hexdigest(),
        )
    else:
        (doc, digest), file = load_spec_document(path), str(path)
    validate(doc, "torch-matrix/policy", file=file)
    name = profile or doc.get("default_profile")
    if name is None:
        raise InputError(
            "no --profile given and the policy names no default_profile",
            file=file,
            path="$.default_profile",
        )
    if name not in doc["profiles"]:
        raise InputError(
            f"no profile {name!r}; the policy has: {', '.join(sorted(doc['profiles']))}",
            file=file,
            path=f"$.profiles.{name}",
        )
    raw: ProfileDoc = doc["profiles"][name]
    stats = raw.get("statistics") or {}
    rules = raw.get("rules", doc.get("rules"))
    if not rules:
        raise InputError(
            "no decision rules: give 'rules' at the top or in the profile",
            file=file,
            path=f"$.profiles.{name}.rules",
        )
    _check_gates(raw, rules, file, f"$.profiles.{name}")
    return Policy(
        file=file,
        sha256=digest,
        profile=name,
        fleet_backends=tuple(raw["fleet_backends"]),
        gates={g: _gate(g, r) for g, r in raw["gates"].items()},
        rules=tuple(_rule(r) for r in rules),
        isolatable=tuple(raw.get("isolatable", ())),
        same_packages=tuple(raw.get("same_packages", ())),
        requires=tuple(raw.get("requires", ())),
        design=_design(stats, file, f"$.profiles.{name}.statistics"),
    )


def _design(stats: StatisticsDoc, file: str, where: str) -> Design:
    looks = tuple(stats.get("looks", DEFAULT_LOOKS))
    if list(looks) != sorted(set(looks)):
        raise InputError(
            f"looks must be strictly increasing round counts, got {list(looks)}",
            file=file,
            path=f"{where}.looks",
        )
    budget = stats.get("budget_s")
    return Design(
        looks=looks,
        fail_level=float(stats.get("fail_level", DEFAULT_FAIL_LEVEL)),
        pass_level=float(stats.get("pass_level", DEFAULT_PASS_LEVEL)),
        budget_s=float(budget) if budget is not None else None,
    )
