"""CI planning: the cells of a matrix packed into GitHub Actions `strategy.matrix` jobs.

A job is a list of whole cells on one backend: `ab` runs both sides of every cell it is given,
interleaved, so a cell's baseline and candidate never land in different jobs.

Jobs are balanced by an estimated cost, not by count alone. A cell costs 1; a compiled cell
(a parameter valued `compiled`, or the `compile` and `export` workloads) costs
COMPILED_COST, because compilation dominates a smoke-sized cell; a distributed cell costs its
rank count times that, because it starts one process per rank.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from suite.core.backends import backend_entry, backend_names
from suite.core.errors import InputError
from suite.core.spec import CellSpec
from suite.workloads.matrix import Matrix

GITHUB_MAX_JOBS = 256  # GitHub's limit on the jobs one matrix may generate
COMPILED_COST = 4
COMPILING_WORKLOADS = frozenset({"compile", "export"})
# The labels a backend runs on when nobody named its runners: the CPU's alone, which the plan
# and aggregate jobs run on too. A GPU or macOS backend is planned only where its runners are
# named (the matrix's `runners:`, or plan's runners), so that no job waits a day on labels no
# runner has; otherwise it is not planned, and the decision says so.
# Both come from the backends' registry entries (suite.core.backends).


def default_runners() -> dict[str, tuple[str, ...]]:
    return {
        name: backend_entry(name).runner_labels
        for name in backend_names()
        if backend_entry(name).planned_by_default
    }


def typical_runners() -> dict[str, tuple[str, ...]]:
    """What a team's runners of each backend are usually labelled: the hint in the message."""
    return {name: backend_entry(name).runner_labels for name in backend_names()}


def cell_cost(cell: CellSpec) -> int:
    """Relative run time of a cell, for balancing jobs (see the module docstring)."""
    compiled = cell.workload in COMPILING_WORKLOADS or "compiled" in (v for _, v in cell.params)
    return (COMPILED_COST if compiled else 1) * max(1, cell.world_size)


def runner_labels(
    matrix: Matrix, backend: str, runners: Mapping[str, Sequence[str]] | None = None
) -> list[str] | None:
    """The `runs-on` labels of a backend's jobs: plan's runners, the matrix's, else the
    default (the CPU's only); None for a backend nobody named runners for."""
    for named in (runners or {}, matrix.runners, default_runners()):
        if named.get(backend):
            return list(named[backend])
    return None


def unplanned(
    matrix: Matrix, cells: Sequence[CellSpec], runners: Mapping[str, Sequence[str]] | None = None
) -> dict[str, int]:
    """The backends no runner labels were named for, with their cell counts: not planned."""
    counts: dict[str, int] = {}
    for cell in {c.cell_id: c for c in cells}.values():
        if runner_labels(matrix, cell.backend, runners) is None:
            counts[cell.backend] = counts.get(cell.backend, 0) + 1
    return counts


def unplanned_note(counts: Mapping[str, int]) -> str:
    """One line for the decision: which backends did not run, and how to make them run."""
    parts = [f"{b} ({n} cell{'' if n == 1 else 's'})" for b, n in counts.items()]
    hint = ", ".join(
        f"{b}: [{', '.join(typical_runners().get(b, ('self-hosted', b)))}]" for b in counts
    )
    return (
        f"not planned, no runners named: {', '.join(parts)}; to run them, name their labels "
        f"under the matrix's runners: (e.g. {hint}) or in the workflow's runners input"
    )


def matrix_change_note(base: Sequence[str], head: Sequence[str], where: str) -> str:
    """One line for the decision when a pull request changes its matrix: the base branch's
    matrix ran, and the cells the change would add or remove are named."""
    added = sorted(set(head) - set(base))
    removed = sorted(set(base) - set(head))
    if not added and not removed:
        return ""

    def named(ids: Sequence[str]) -> str:
        shown = ", ".join(ids[:5])
        return f"{shown} (+{len(ids) - 5} more)" if len(ids) > 5 else shown

    parts = []

    def cells(ids: Sequence[str]) -> str:
        return f"{len(ids)} cell{'' if len(ids) == 1 else 's'}"

    if removed:
        parts.append(f"removes {cells(removed)}, which still ran: {named(removed)}")
    if added:
        parts.append(f"adds {cells(added)}, which run once it merges: {named(added)}")
    return (
        f"this pull request changes {where}; the base branch's matrix ran. The change "
        + "; ".join(parts)
    )


def _jobs_per_backend(
    groups: dict[str, list[CellSpec]], max_jobs: int, cells_per_job: int | None
) -> dict[str, int]:
    if cells_per_job is not None:
        jobs = {b: math.ceil(len(cells) / cells_per_job) for b, cells in groups.items()}
        if sum(jobs.values()) > max_jobs:
            raise InputError(
                f"{sum(jobs.values())} jobs of at most {cells_per_job} cells exceed the limit "
                f"of {max_jobs} jobs; raise --cells-per-job or select fewer cells",
                option="--cells-per-job",
            )
        return jobs
    jobs = {b: 1 for b in groups}
    cost = {b: sum(map(cell_cost, cells)) for b, cells in groups.items()}
    # Each spare job goes to the backend with the most cost per job (D'Hondt), so that the
    # slowest job of every backend ends about the same time; ties go to the earlier backend.
    for _ in range(max_jobs - len(groups)):
        open_ = [b for b in groups if jobs[b] < len(groups[b])]
        if not open_:
            break
        jobs[max(open_, key=lambda b: cost[b] / jobs[b])] += 1
    return jobs


def _pack(cells: list[CellSpec], jobs: int, capacity: int | None) -> list[list[CellSpec]]:
    """Longest processing time first: costly cells go first, each to the least-loaded job."""
    placed: list[list[int]] = [[] for _ in range(jobs)]
    load = [0] * jobs
    for i in sorted(range(len(cells)), key=lambda i: (-cell_cost(cells[i]), i)):
        room = [j for j in range(jobs) if capacity is None or len(placed[j]) < capacity]
        best = min(room, key=lambda j: (load[j], len(placed[j]), j))
        placed[best].append(i)
        load[best] += cell_cost(cells[i])
    # Within a job, cells keep the matrix's order.
    return [[cells[i] for i in sorted(indices)] for indices in placed if indices]


def plan(
    matrix: Matrix,
    cells: list[CellSpec],
    *,
    max_jobs: int = GITHUB_MAX_JOBS,
    cells_per_job: int | None = None,
    runners: Mapping[str, Sequence[str]] | None = None,
) -> dict[str, Any]:
    """A `strategy.matrix` value: {"include": [one entry per job]}, deterministic for its input.

    Without cells_per_job the cells are spread over as many jobs as max_jobs allows (one cell
    per job at most); with it, each job holds at most that many cells. Cells of a backend
    without runners (unplanned()) get no job; a matrix of only such cells is an input error.
    """
    if not 1 <= max_jobs <= GITHUB_MAX_JOBS:
        raise InputError(f"max jobs must be 1 to {GITHUB_MAX_JOBS}, got {max_jobs}")
    if cells_per_job is not None and cells_per_job < 1:
        raise InputError(f"cells per job must be at least 1, got {cells_per_job}")
    if not cells:
        raise InputError("no cells to plan: GitHub refuses an empty matrix", file=matrix.file)
    skipped = unplanned(matrix, cells, runners)
    groups: dict[str, list[CellSpec]] = {}
    seen: set[str] = set()
    for cell in cells:
        if cell.cell_id not in seen and cell.backend not in skipped:  # a cell runs once
            seen.add(cell.cell_id)
            groups.setdefault(cell.backend, []).append(cell)
    if not groups:
        raise InputError(
            unplanned_note(skipped).replace("not planned", "nothing to plan", 1),
            file=matrix.file,
            path="$.runners",
        )
    if len(groups) > max_jobs:
        raise InputError(
            f"{len(groups)} backends ({', '.join(groups)}) need at least {len(groups)} jobs, "
            f"more than the {max_jobs} allowed",
            option="--max-jobs",
        )
    labels = {b: runner_labels(matrix, b, runners) or [] for b in groups}
    include: list[dict[str, Any]] = []
    for backend, count in _jobs_per_backend(groups, max_jobs, cells_per_job).items():
        packed = _pack(groups[backend], count, cells_per_job)
        width = len(str(len(packed)))
        for n, job in enumerate(packed, 1):
            include.append(
                {
                    "job": f"{backend}-{n:0{width}d}",
                    "backend": backend,
                    "runs-on": labels[backend],
                    "cells": " ".join(c.cell_id for c in job),
                    "cell_count": len(job),
                }
            )
    return {"include": include}
