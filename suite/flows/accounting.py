"""Every planned job and cell accounted for: the aggregate of a fanned-out matrix reads the plan
that made the jobs (the strategy matrix `plan` printed) beside the results that came back.

A bench job that failed, was cancelled, timed out or lost its runner uploads nothing, or only
part of its results; judging whatever folders exist would let a decision over the CPU jobs
alone say adopt while the CUDA job died. Here each planned cell that no job reported becomes
a cell whose status gate is `untested` with the reason, and the reason also reaches the
decision, which is then never better than defer (suite/judge/decision.py).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from suite.core.decision_records import Cell
from suite.core.errors import InputError
from suite.judge.policy import Policy
from suite.judge.verdicts import gate_result


@dataclass(frozen=True)
class PlannedJob:
    job: str
    backend: str
    cells: tuple[str, ...]


def load_plan(path: Path) -> list[PlannedJob]:
    """The jobs of a plan file: {"include": [{"job", "backend", "cells": "id id ..."}]}."""
    try:
        doc: Any = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(f"cannot read the plan: {exc}", file=str(path)) from None
    include = doc.get("include") if isinstance(doc, dict) else None
    if not isinstance(include, list) or not include:
        raise InputError("a plan holds a non-empty include list", file=str(path), path="$.include")
    jobs: list[PlannedJob] = []
    for i, entry in enumerate(include):
        fields = {k: entry.get(k) if isinstance(entry, dict) else None for k in ("job", "backend")}
        cells = entry.get("cells") if isinstance(entry, dict) else None
        for key, value in {**fields, "cells": cells}.items():
            if not isinstance(value, str) or not value.strip():
                raise InputError(
                    f"{key} must be a non-empty string",
                    file=str(path),
                    path=f"$.include[{i}].{key}",
                )
        assert isinstance(cells, str)
        jobs.append(PlannedJob(str(fields["job"]), str(fields["backend"]), tuple(cells.split())))
    names = [j.job for j in jobs]
    if len(set(names)) != len(names):
        raise InputError("job names repeat", file=str(path), path="$.include[*].job")
    return jobs


def missing_cell(policy: Policy, cell_id: str, reason: str) -> Cell:
    """A planned cell nobody reported: its status gate untested, with the reason."""
    workload = cell_id.split("@", 1)[0].split(".", 1)[0]
    backend = cell_id.rpartition("@")[2] or "unknown"
    gate = gate_result(policy.gates["status"], "untested", reason)
    return {
        "cell_id": cell_id,
        "row_id": f"{workload}@{backend}",
        "workload": workload,
        "backend": backend,
        "lane": "production",  # not known without its results: never capped below its row
        "baseline_status": None,
        "candidate_status": None,
        "gates": [gate],
        "repro": None,
        "artifacts": {},
    }


def account(
    plan: Sequence[PlannedJob],
    reported: Mapping[str, set[str]],
    policy: Policy,
    jobs_result: str | None = None,
) -> tuple[list[Cell], list[str]]:
    """(cells for what the plan holds and no job reported, one line per such job) given each
    reporting job's name -> the cell ids its results hold on both sides. jobs_result is what
    the workflow says of the bench jobs together (needs.bench.result), named in the lines."""
    cells: list[Cell] = []
    lines: list[str] = []
    said = (
        f": the bench jobs ended {jobs_result}" if jobs_result not in (None, "", "success") else ""
    )
    for job in plan:
        held = reported.get(job.job)
        if held is None:
            why = f"job {job.job} did not report{said}"
            absent = list(job.cells)
        else:
            absent = [c for c in job.cells if c not in held]
            why = f"missing from job {job.job}'s results{said}"
        if not absent:
            continue
        cells.extend(missing_cell(policy, cell_id, why) for cell_id in absent)
        count = f"{len(absent)} planned cell{'' if len(absent) == 1 else 's'}"
        shown = ", ".join(absent[:3]) + (f" (+{len(absent) - 3} more)" if len(absent) > 3 else "")
        lines.append(f"{why}: {count} untested ({job.backend}: {shown})")
    return cells, lines


def unplanned_jobs(plan: Sequence[PlannedJob], reported: Sequence[str]) -> list[str]:
    """Result folders of jobs the plan does not hold (another run's, say): not judged."""
    planned = {j.job for j in plan}
    return [name for name in reported if name not in planned]
