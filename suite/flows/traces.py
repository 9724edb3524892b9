"""Chrome traces of the cells an A/B failed on a timing or memory gate, five more steps a
side, and the ops whose self time changed most between them: where the time went, beside the
gate that says it went."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from suite.core.decision_records import DecisionRecord
from suite.core.spec import CellSpec
from suite.execute.runner import Run
from suite.judge.registry import PERFORMANCE_GATES
from suite.report.opdiff import op_diff


def judge_with_traces(
    judge: Callable[..., DecisionRecord],
    decision: DecisionRecord,
    cells: Sequence[CellSpec],
    runs: dict[str, Run],
    out: Path,
) -> DecisionRecord:
    """DECISION judged again with the traces of the cells it failed, and their op diffs."""
    try:
        artifacts = _trace_failures(decision, cells, runs, out)
    finally:
        for run in runs.values():
            run.close()
    if not artifacts:
        return decision
    decision = judge(artifacts=artifacts)
    add_op_diffs(decision, artifacts)
    return decision


def add_op_diffs(decision: DecisionRecord, artifacts: dict[str, dict[str, str]]) -> None:
    """For each cell traced on both sides, the ops whose self time changed most: where the
    time went, beside the gate that says it went. A trace that cannot be read leaves a warning
    in the cell instead."""
    for cell in decision["cells"]:
        traces = artifacts.get(cell["cell_id"]) or {}
        if "baseline_trace" not in traces or "candidate_trace" not in traces:
            continue
        try:
            cell["ops"] = op_diff(Path(traces["baseline_trace"]), Path(traces["candidate_trace"]))
        except ValueError as exc:
            cell["ops_warning"] = str(exc)


def _trace_failures(
    decision: DecisionRecord, cells: Sequence[CellSpec], runs: dict[str, Run], out: Path
) -> dict[str, dict[str, str]]:
    """Chrome traces of five more steps per side for each cell failing a timing or memory gate."""
    by_id = {c.cell_id: c for c in cells}
    artifacts: dict[str, dict[str, str]] = {}
    for cell in decision["cells"]:
        if not any(
            g["gate"] in PERFORMANCE_GATES and g["verdict"] == "fail" for g in cell["gates"]
        ):
            continue
        spec = by_id.get(cell["cell_id"])
        if spec is None:
            continue
        for role, run in runs.items():
            trace = run.trace(spec, out / "traces")
            if trace is not None:
                artifacts.setdefault(cell["cell_id"], {})[f"{role}_trace"] = str(trace)
    return artifacts
