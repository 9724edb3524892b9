"""A/B: the same cells on a baseline and a candidate side, in interleaved rounds.

Within a round every cell runs on both sides back to back, and the order of the sides flips
each round, so that drift of the machine (thermal, background load) hits both sides alike.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from suite.compare import Side as Loaded
from suite.compare import decide
from suite.matrix import Matrix
from suite.policy import Policy
from suite.progress import Progress
from suite.rollback_gate import compatibility, rehearsal
from suite.runner import Run, RunOptions
from suite.sides import Side
from suite.spec import CellSpec
from suite.workloads import Resolved

TIMING_GATES = ("latency_p50", "latency_p95", "throughput", "peak_memory", "memory_budget")


@dataclass(frozen=True)
class AbOptions:
    out: Path
    rounds: int
    timeout_s: float | None
    memory_limit_bytes: int | None
    progress: Progress | None
    traces: bool = True
    rollback: bool = True


def side_command(matrix: Matrix, side: Side, resolved: dict[str, Resolved]) -> list[str]:
    """The plain run command equivalent to one side, for evidence and reproduction."""
    argv = ["torch-matrix", "run", "--python", side.interpreter, "--size", matrix.profile]
    if not matrix.file.startswith("<"):
        argv += ["--matrix", matrix.file]
    for ref in resolved:
        argv += ["--workload", ref]
    return argv


def run_ab(
    matrix: Matrix,
    cells: Sequence[CellSpec],
    resolved: dict[str, Resolved],
    baseline: Side,
    candidate: Side,
    policy: Policy,
    options: AbOptions,
) -> dict[str, Any]:
    rounds = tuple(range(options.rounds))
    runs: dict[str, Run] = {}
    for role, side in (("baseline", baseline), ("candidate", candidate)):
        run_options = RunOptions(
            out=options.out / role,
            interpreter=side.interpreter,
            timeout_s=options.timeout_s,
            memory_limit_bytes=options.memory_limit_bytes,
            rounds=rounds,
            command=side_command(matrix, side, resolved),
            progress=options.progress,
            launcher=side.launcher,
        )
        extra = {
            "label": side.label,
            "side": role,
            "prepared_s": side.prepared_s,
            "policy": {"file": policy.file, "sha256": policy.sha256, "profile": policy.profile},
        }
        runs[role] = Run(matrix, run_options, cells, resolved, extra=extra)
    progress = options.progress
    try:
        for round_no in rounds:
            order = ("baseline", "candidate") if round_no % 2 == 0 else ("candidate", "baseline")
            for spec in cells:
                for role in order:
                    doc, reused = runs[role].execute(spec, round_no)
                    if progress is not None:
                        progress.finished(
                            f"{spec.cell_id} [{role} r{round_no}]", doc, reused=reused
                        )
    except BaseException:
        for run in runs.values():
            run.finish("interrupted")
        raise
    for run in runs.values():
        run.finish()
    checks: list[dict[str, Any]] = []
    rollback: dict[str, Any] | None = None
    if options.rollback and "rollback" in policy.gates:
        sides = {
            "baseline": (baseline, runs["baseline"]),
            "candidate": (candidate, runs["candidate"]),
        }
        checks, reports = compatibility(sides, options.out)
        cell, timing = rehearsal(
            matrix, cells, resolved, baseline, runs["baseline"], policy, options.out
        )
        checks.append(cell)
        rollback = {**timing, "checkpoints": reports}
    loaded_base = Loaded.load(options.out / "baseline", baseline.label)
    loaded_cand = Loaded.load(options.out / "candidate", candidate.label)
    decision = decide(loaded_base, loaded_cand, policy, extra_cells=checks, rollback=rollback)
    if options.traces:
        artifacts = _trace_failures(decision, cells, runs, options.out)
        if artifacts:
            decision = decide(
                loaded_base,
                loaded_cand,
                policy,
                artifacts=artifacts,
                extra_cells=checks,
                rollback=rollback,
            )
    return decision


def _trace_failures(
    decision: dict[str, Any], cells: Sequence[CellSpec], runs: dict[str, Run], out: Path
) -> dict[str, dict[str, str]]:
    """Chrome traces of one more step per side for each cell failing a timing or memory gate."""
    by_id = {c.cell_id: c for c in cells}
    artifacts: dict[str, dict[str, str]] = {}
    for cell in decision["cells"]:
        if not any(g["gate"] in TIMING_GATES and g["verdict"] == "fail" for g in cell["gates"]):
            continue
        spec = by_id.get(cell["cell_id"])
        if spec is None:
            continue
        for role, run in runs.items():
            trace = run.trace(spec, out / "traces")
            if trace is not None:
                artifacts.setdefault(cell["cell_id"], {})[f"{role}_trace"] = str(trace)
    return artifacts


def describe(side: Side) -> str:
    return f"{side.spec} ({shlex.quote(side.interpreter)})"
