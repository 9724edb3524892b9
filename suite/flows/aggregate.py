"""One decision from the results of many CI jobs, judged by one policy.

Each job ran `ab` for its share of the cells (baseline and candidate on the same runner). The
aggregate judges every job's raw results again with the policy it is given — in CI the base
branch's, so a pull request cannot loosen its own thresholds — and joins them.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from suite.core.decision_records import DecisionRecord, RollbackRecord
from suite.core.errors import InputError
from suite.core.loaded import LoadedRun
from suite.core.records import Role
from suite.flows.compare import decide
from suite.judge.decision import decision_record
from suite.judge.policy import Policy
from suite.judge.rollback import judge_rollback


def job_dirs(roots: Sequence[Path]) -> list[Path]:
    """Every folder below the roots that holds both baseline/run.json and candidate/run.json."""
    found: list[Path] = []
    for root in roots:
        if not root.exists():
            raise InputError("no such folder", file=str(root))
        for run in sorted(root.rglob("baseline/run.json")):
            job = run.parent.parent
            if (job / "candidate" / "run.json").is_file() and job not in found:
                found.append(job)
    if not found:
        raise InputError(
            "holds no job results (baseline/run.json beside candidate/run.json)",
            file=", ".join(map(str, roots)),
        )
    return found


def job_name(job: Path) -> str:
    """A bench job's name from its results folder: torch-matrix-job~MATRIX~JOB (the artifact
    the reusable workflow uploads), torch-matrix-job-JOB before matrix names, or the folder."""
    if job.name.startswith("torch-matrix-job~"):
        return job.name.rpartition("~")[2]
    return job.name.removeprefix("torch-matrix-job-")


def aggregate(jobs: Sequence[Path], policy: Policy, *, notes: Sequence[str] = ()) -> DecisionRecord:
    decisions: list[DecisionRecord] = []
    rollbacks: dict[str, RollbackRecord] = {}
    for job in jobs:
        checks, rollback = judge_rollback(job, policy)  # judged again, under this policy
        name = job_name(job)
        for cell in checks:  # one row per job: the runners differ
            cell["cell_id"] = cell["cell_id"].replace("@any", f"@{name}")
            cell["row_id"] = f"rollback@{name}"
        if rollback is not None:
            rollbacks[name] = rollback
        base, cand = LoadedRun.load(job / "baseline"), LoadedRun.load(job / "candidate")
        decisions.append(decide(base, cand, policy, extra_cells=checks))
    first = decisions[0]
    worst = max(rollbacks.values(), key=lambda r: r.get("duration_s", 0.0)) if rollbacks else None
    return decision_record(
        policy,
        [cell for d in decisions for cell in d["cells"]],
        matrix=first["matrix"],
        baseline={**first["baseline"], "run_id": _joined(decisions, "baseline")},
        candidate={**first["candidate"], "run_id": _joined(decisions, "candidate")},
        differences=[diff for d in decisions for diff in d["comparable"]["differences"]],
        mismatches=sorted({m for d in decisions for m in d["policy"]["mismatches"]}),
        notes=notes,
        rollback={**worst, "jobs": rollbacks} if worst is not None else None,
    )


def _joined(decisions: Sequence[DecisionRecord], side: Role) -> str:
    return ", ".join(d[side]["run_id"] for d in decisions)
