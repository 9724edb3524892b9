"""Gates the evidence never reached: an adopt says every gate that can stand in its way was
decided. A gate of severity soft or above that the profile names, and that the matrix's cells
have, but that no cell decided (every reading untested or inconclusive), is missing; the
decision is then at least defer and says which, and why in each cell. A profile may let a gate be
missing (`may_be_missing: true`), or be missing in the cells where other gates decided
(`may_be_missing: [instructions]`: a CPU runner whose timings were disturbed, but whose
instruction counts decided)."""

from __future__ import annotations

import fnmatch
from collections.abc import Sequence

from suite.core.decision_records import Cell, GateRecord
from suite.judge.policy import Policy

# Verdicts that settle a gate: a change shown, or shown absent.
SETTLED = frozenset({"pass", "improved", "fail", "fixed", "new-failure"})
# Severities whose verdict can stand in the way of an adopt.
BLOCKING = frozenset({"hard", "soft", "required", "budget"})
SHOWN = 3


def missing_gates(policy: Policy, cells: Sequence[Cell]) -> list[str]:
    """One line per missing gate: in how many cells it went undecided, and the first few cells
    with their gate's own reason."""
    open_by_gate: dict[str, list[tuple[Cell, GateRecord]]] = {}
    settled: set[str] = set()
    for cell in cells:
        if cell.get("baseline_status") == cell.get("candidate_status") == "skipped":
            continue  # a backend or dependency absent here on both sides: nothing to judge
        decided = {g["gate"] for g in cell["gates"] if g["verdict"] in SETTLED}
        settled |= decided
        for gate in cell["gates"]:
            spec = policy.gates.get(gate["gate"])
            if spec is None or spec.severity not in BLOCKING or spec.may_be_missing is True:
                continue
            if gate["verdict"] in ("untested", "inconclusive"):
                stands_in = spec.may_be_missing or ()
                if not decided & set(stands_in):
                    open_by_gate.setdefault(gate["gate"], []).append((cell, gate))
    lines = []
    for name, opened in open_by_gate.items():
        if name in settled:
            continue  # decided somewhere: what it showed there stands, the rest is listed apart
        shown = "; ".join(
            f"{c['cell_id']}: {g['verdict']} — {g['message']}" for c, g in opened[:SHOWN]
        )
        more = f" (+{len(opened) - SHOWN} more)" if len(opened) > SHOWN else ""
        lines.append(
            f"{name} was decided in no cell ({len(opened)} undecided), and the profile does not "
            f"let it be missing: {shown}{more}"
        )
    return lines


def excused_gates(policy: Policy, cells: Sequence[Cell]) -> list[str]:
    """One line per gate the profile lets be missing and that went undecided in some cell that
    ran: what an adopt did not rest on, said where the decision is read, with the rule."""
    excused: dict[str, int] = {}
    for cell in cells:
        if cell.get("baseline_status") == cell.get("candidate_status") == "skipped":
            continue
        decided = {g["gate"] for g in cell["gates"] if g["verdict"] in SETTLED}
        for gate in cell["gates"]:
            spec = policy.gates.get(gate["gate"])
            if spec is None or spec.severity not in BLOCKING or not spec.may_be_missing:
                continue
            if gate["verdict"] not in ("untested", "inconclusive"):
                continue
            stands_in = () if isinstance(spec.may_be_missing, bool) else spec.may_be_missing
            if spec.may_be_missing is True or decided & set(stands_in):
                excused[gate["gate"]] = excused.get(gate["gate"], 0) + 1
    lines = []
    for name, count in excused.items():
        stands = policy.gates[name].may_be_missing
        where = "" if isinstance(stands, bool) else f" where {', '.join(stands)} decided"
        lines.append(
            f"{name} undecided in {count} cell{'' if count == 1 else 's'}, which the "
            f"{policy.profile} profile lets be missing{where}: it does not hold the decision"
        )
    return lines


# A side that ran the cell and said how it went: evidence, good or bad.
RAN = frozenset({"ok", "failed", "crashed", "timeout", "oom"})


def required_rows(policy: Policy, cells: Sequence[Cell]) -> list[str]:
    """The profile's `requires:` rows (fnmatch on the workload or 'workload@backend') that no
    cell gave evidence for: one that ran on both sides, on each fleet backend the run covers
    (on every backend it covers, where it covers none of the fleet's); a backend whose every
    cell was skipped on both sides is not covered. A row skipped, unsupported or never reported
    on a side is no evidence."""
    if not policy.requires:
        return []
    # A backend the run covers: one some cell ran on (not only skipped: a backend absent on
    # this runner covers nothing), never the rollback's 'any'.
    backends = sorted(
        {
            c["backend"]
            for c in cells
            if c["backend"] != "any"
            and not c["baseline_status"] == c["candidate_status"] == "skipped"
        }
    )
    wanted = [b for b in backends if b in policy.fleet_backends] or backends
    lacking = []
    for pattern in policy.requires:
        for backend in wanted:
            matching = [
                c
                for c in cells
                if c["backend"] == backend
                and (
                    fnmatch.fnmatchcase(c["workload"], pattern)
                    or fnmatch.fnmatchcase(f"{c['workload']}@{backend}", pattern)
                )
            ]
            if any(c["baseline_status"] in RAN and c["candidate_status"] in RAN for c in matching):
                continue
            said = sorted({f"{c['baseline_status']}/{c['candidate_status']}" for c in matching})
            why = f"its cells ran as {', '.join(said)}" if matching else "no cell of it ran"
            lacking.append(f"{pattern} on {backend} ({why})")
    if not lacking:
        return []
    return [f"required rows without evidence (the profile's requires): {'; '.join(lacking)}"]
