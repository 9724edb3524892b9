"""JUnit XML report: one testcase per cell x gate, for CI systems that chart test results.

ElementTree does the XML escaping; escape.xml_safe removes the characters XML 1.0 cannot
carry at all (a crashed worker's stderr can contain any byte).
"""

from __future__ import annotations

import xml.etree.ElementTree as ET

from suite.core.decision_records import Cell, DecisionRecord, GateRecord
from suite.report.escape import xml_safe
from suite.report.table import (
    format_change,
    format_ci,
    format_p,
    format_threshold,
    format_value,
)

FAILED = frozenset({"fail", "new-failure"})
SKIPPED = frozenset({"inconclusive", "untested", "unsupported", "not-comparable"})


def _details(cell: Cell, gate: GateRecord) -> str:
    name, unit = gate["gate"], gate.get("unit")
    lines = [
        f"verdict: {gate['verdict']}",
        f"severity: {gate['severity']}",
        f"baseline: {format_value(gate.get('baseline'), unit, name)}",
        f"candidate: {format_value(gate.get('candidate'), unit, name)}",
        f"change: {format_change(gate.get('change'))}",
        f"ci: {format_ci(gate.get('ci'))}",
        f"p-value: {format_p(gate.get('p_value'))}",
        f"threshold: {format_threshold(gate.get('threshold'))}",
        f"baseline status: {cell['baseline_status']}",
        f"candidate status: {cell['candidate_status']}",
        f"message: {gate['message']}",
    ]
    repro = cell.get("repro") or {}
    if repro.get("command"):
        lines.append(f"reproduce: {repro['command']}")
    if repro.get("docker"):
        lines.append(f"in the recorded image: {repro['docker']}")
    lines += [f"artifact {k}: {v}" for k, v in sorted((cell.get("artifacts") or {}).items())]
    return "\n".join(lines)


def _testcase(suite: ET.Element, cell: Cell, gate: GateRecord) -> str:
    """Add one testcase; return its verdict's outcome: 'failure', 'skipped' or 'pass'."""
    case = ET.SubElement(
        suite,
        "testcase",
        classname=xml_safe(cell["row_id"]),
        name=xml_safe(f"{cell['cell_id']}::{gate['gate']}"),
    )
    verdict = gate["verdict"]
    message = xml_safe(f"{verdict}: {gate['message']}")
    if verdict in FAILED:
        failure = ET.SubElement(case, "failure", message=message, type=xml_safe(verdict))
        failure.text = xml_safe(_details(cell, gate))
        return "failure"
    if verdict in SKIPPED:
        ET.SubElement(case, "skipped", message=message)
        return "skipped"
    return "pass"


def render_junit(decision: DecisionRecord) -> str:
    """A single <testsuite name="torch-matrix">; the decision itself sits in its properties."""
    suite = ET.Element("testsuite", name="torch-matrix")
    properties = ET.SubElement(suite, "properties")
    policy = decision["policy"]
    for key, value in (
        ("decision", decision["decision"]),
        ("policy.profile", policy["profile"]),
        ("policy.sha256", policy["sha256"]),
        ("baseline.torch", decision["baseline"]["torch"]),
        ("baseline.run_id", decision["baseline"]["run_id"]),
        ("candidate.torch", decision["candidate"]["torch"]),
        ("candidate.run_id", decision["candidate"]["run_id"]),
    ):
        ET.SubElement(properties, "property", name=key, value=xml_safe(value))
    outcomes = [_testcase(suite, cell, g) for cell in decision["cells"] for g in cell["gates"]]
    # Attributes are set after the children exist; ElementTree keeps insertion order,
    # so name stays first.
    suite.set("tests", str(len(outcomes)))
    suite.set("failures", str(outcomes.count("failure")))
    suite.set("errors", "0")
    suite.set("skipped", str(outcomes.count("skipped")))
    ET.indent(suite)
    return ET.tostring(suite, encoding="unicode", xml_declaration=True) + "\n"
