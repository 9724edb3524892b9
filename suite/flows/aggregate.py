"""One decision from the results of many CI jobs, judged by one policy.

Each job ran `ab` for its share of the cells (baseline and candidate on the same runner). The
aggregate judges every job's raw results again with the policy it is given — in CI the base
branch's, so a pull request cannot loosen its own thresholds — and joins them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from suite.core.decision_records import (
    DecisionRecord,
    PackageDifference,
    RollbackRecord,
    SideEvidence,
)
from suite.core.loaded import LoadedRun
from suite.core.records import Role
from suite.flows.accounting import PlannedJob, account, unplanned_jobs
from suite.flows.compare import decide
from suite.judge.decision import SHORTFALL, decision_record
from suite.judge.models import MODELS_LINE
from suite.judge.policy import Policy
from suite.judge.rollback import judge_rollback
from suite.untrusted.artifacts import claimed_job
from suite.untrusted.shown import shown


def job_name(job: Path) -> str:
    """A bench job's name from its results folder: torch-matrix-job~MATRIX~JOB (the artifact
    the reusable workflow uploads), torch-matrix-job-JOB before matrix names, or the folder."""
    if job.name.startswith("torch-matrix-job~"):
        return job.name.rpartition("~")[2]
    return job.name.removeprefix("torch-matrix-job-")


@dataclass(frozen=True)
class Planned:
    """What the aggregate checks the results against: the plan's jobs, what the workflow says
    of them (needs.bench.result), and the pins, named when no job reported at all."""

    jobs: Sequence[PlannedJob]
    jobs_result: str | None = None
    pins: tuple[str, str] = ("unknown", "unknown")


def aggregate(
    jobs: Sequence[Path],
    policy: Policy,
    *,
    notes: Sequence[str] = (),
    planned: Planned | None = None,
    strays: Sequence[str] = (),
) -> DecisionRecord:
    """strays: lines naming results found outside a job's artifact root
    (suite/untrusted/artifacts.py); they hold the decision at defer, as a job that never
    reported does."""
    if planned is not None:
        stray = unplanned_jobs(planned.jobs, [job_name(j) for j in jobs])
        notes = [
            *notes,
            *(
                f"results of job {n}, which this run's plan does not hold, were not judged"
                for n in stray
            ),
        ]
        jobs = [j for j in jobs if job_name(j) not in stray]
        claims = {j: claimed_job(j) for j in jobs}
        wrong = [j for j in jobs if any(said != job_name(j) for said in claims[j])]
        notes = [*notes, *(_wrong_job_line(job_name(j), claims[j]) for j in wrong)]
        jobs = [j for j in jobs if j not in wrong]
    decisions: list[DecisionRecord] = []
    rollbacks: dict[str, RollbackRecord] = {}
    reported: dict[str, set[str]] = {}
    for job in jobs:
        checks, rollback = judge_rollback(job, policy)  # judged again, under this policy
        name = job_name(job)
        for cell in checks:  # one row per job: the runners differ
            cell["cell_id"] = cell["cell_id"].replace("@any", f"@{name}")
            cell["row_id"] = f"rollback@{name}"
        if rollback is not None:
            rollbacks[name] = rollback
        base, cand = LoadedRun.load(job / "baseline"), LoadedRun.load(job / "candidate")
        reported[name] = {*base.results, *cand.results}
        decisions.append(decide(base, cand, policy, extra_cells=checks))
    missing, unreported = (
        account(planned.jobs, reported, policy, planned.jobs_result) if planned else ([], [])
    )
    worst = max(rollbacks.values(), key=lambda r: r.get("duration_s", 0.0)) if rollbacks else None
    first = decisions[0] if decisions else None
    notes = [*notes, *_pairs_note(decisions, [job_name(j) for j in jobs])]
    # What each job's decision said of its own sides: the libraries and models that differ,
    # and fixed rounds that judged fewer, carried into the joined decision.
    notes += [r for d in decisions for r in d["reasons"] if r.startswith(MODELS_LINE)]
    return decision_record(
        policy,
        [*(cell for d in decisions for cell in d["cells"]), *missing],
        matrix=first["matrix"] if first else None,  # type: ignore[arg-type]
        baseline=_side(decisions, "baseline", planned),
        candidate=_side(decisions, "candidate", planned),
        differences=[diff for d in decisions for diff in d["comparable"]["differences"]],
        mismatches=sorted({m for d in decisions for m in d["policy"]["mismatches"]}),
        notes=notes,
        rollback={**worst, "jobs": rollbacks} if worst is not None else None,
        unreported=[*strays, *unreported],
        packages=_packages(decisions),
        lead=list(
            dict.fromkeys(r for d in decisions for r in d["reasons"] if r.startswith(SHORTFALL))
        ),
    )


def _wrong_job_line(name: str, claims: tuple[str | None, str | None]) -> str:
    """The line for a job's artifact whose results name another job, or none."""
    said = " and ".join(
        f"{side} {shown(claim) if claim is not None else 'no job'}"
        for side, claim in zip(("baseline", "candidate"), claims, strict=True)
    )
    return (
        f"the results in job {shown(name)}'s artifact record {said} (ab --job), not "
        f"{shown(name)}: not judged, as if the job had not reported"
    )


def _packages(decisions: Sequence[DecisionRecord]) -> list[PackageDifference]:
    """Every job's library differences, the cells of one difference added up."""
    found: dict[tuple[str, str | None, str | None], int] = {}
    for d in decisions:
        for p in d["comparable"].get("packages") or []:
            key = (p["name"], p["baseline"], p["candidate"])
            found[key] = found.get(key, 0) + p["cells"]
    return [
        {"name": n, "baseline": b, "candidate": c, "cells": k}
        for (n, b, c), k in sorted(found.items(), key=lambda x: x[0][0])
    ]


def _side(decisions: Sequence[DecisionRecord], side: Role, planned: Planned | None) -> SideEvidence:
    if decisions:
        return {**decisions[0][side], "run_id": _joined(decisions, side)}
    pin = (planned.pins if planned else ("unknown", "unknown"))[side == "candidate"]
    return {"label": side, "run_id": "none: no job reported", "torch": pin, "dir": ""}


def _joined(decisions: Sequence[DecisionRecord], side: Role) -> str:
    return ", ".join(d[side]["run_id"] for d in decisions)


def _pairs_note(decisions: Sequence[DecisionRecord], names: Sequence[str]) -> list[str]:
    """When the jobs ran different torch pairs (each backend its pin-source's), one line naming
    each job's: the decision's own baseline and candidate are the first job's."""
    pairs = {
        name: f"{d['baseline'].get('torch')} -> {d['candidate'].get('torch')}"
        for name, d in zip(names, decisions, strict=True)
    }
    if len(set(pairs.values())) <= 1:
        return []
    shown = "; ".join(f"{name}: {pair}" for name, pair in pairs.items())
    return [f"the jobs ran different torch pairs ({shown}): each row is its own job's pair"]
