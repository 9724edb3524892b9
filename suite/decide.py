"""Decision rules: gate verdicts -> a decision per (cell, gate), per row and overall.

A row is one workload on one backend. Rows in the prototype lane, or matched by the policy's
isolatable patterns, never go past 'isolate'. The exit code of ab and compare is derived from
the overall decision here and nowhere else.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from suite.policy import DECISIONS, Policy, decision_rank, worst

EXIT_CODES = {"adopt": 0, "isolate": 4, "defer": 5, "rollback": 6}


def exit_code(decision: str) -> int:
    return EXIT_CODES[decision]


def apply_rules(policy: Policy, cells: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Annotate every gate with its decision; return the rows with their decisions and reasons."""
    rows: dict[str, dict[str, Any]] = {}
    for cell in cells:
        fleet = cell["backend"] in policy.fleet_backends
        row = rows.setdefault(
            cell["row_id"],
            {
                "row_id": cell["row_id"],
                "workload": cell["workload"],
                "backend": cell["backend"],
                "lane": cell["lane"],
                "fleet": fleet,
                "isolatable": policy.is_isolatable(cell["workload"], cell["backend"]),
                "decision": "adopt",
                "reasons": [],
                "verdicts": Counter(),
            },
        )
        if cell["lane"] == "prototype":
            row["lane"] = "prototype"
        for gate in cell["gates"]:
            row["verdicts"][gate["verdict"]] += 1
            gate_obj = policy.gates[gate["gate"]]
            matched = [
                r
                for r in policy.rules
                if r.matches(gate_obj, gate["verdict"], fleet=fleet, lane=cell["lane"])
            ]
            decision = worst([r.decision for r in matched])
            gate["decision"] = decision
            if matched and decision != "adopt":
                # The most specific rule of the worst decision explains it best.
                rule = max(matched, key=lambda r: (decision_rank(r.decision), r.gate is not None))
                why = rule.reason or rule.decision
                reason = f"{cell['cell_id']}: {gate['gate']} {gate['verdict']} — {why}"
                row["reasons"].append((decision_rank(decision), reason))
                row["decision"] = worst([row["decision"], decision])
    out = []
    for row in rows.values():
        capped = row["lane"] == "prototype" or row["isolatable"]
        if capped and decision_rank(row["decision"]) > decision_rank("isolate"):
            why = "prototype lane" if row["lane"] == "prototype" else "isolatable by policy"
            row["reasons"].append(
                (-1, f"{row['row_id']} capped at isolate ({why}; was {row['decision']})")
            )
            row["decision"] = "isolate"
        row["reasons"] = [r for _, r in sorted(row["reasons"], key=lambda x: -x[0])]
        row["verdicts"] = dict(sorted(row["verdicts"].items()))
        out.append(row)
    return out


def overall(rows: list[dict[str, Any]]) -> tuple[str, list[str]]:
    decision = worst([r["decision"] for r in rows])
    if decision == "adopt":
        return decision, [f"all {len(rows)} rows pass the policy's gates"]
    reasons = []
    for row in rows:
        if row["decision"] == decision:
            first = row["reasons"][0] if row["reasons"] else ""
            more = len(row["reasons"]) - 1
            reasons.append(
                f"{row['row_id']} → {decision}: {first}" + (f" (+{more} more)" if more > 0 else "")
            )
    return decision, reasons


__all__ = ["DECISIONS", "EXIT_CODES", "apply_rules", "exit_code", "overall"]
