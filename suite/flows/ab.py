"""A/B: the same cells on a baseline and a candidate side, in interleaved paired rounds.

Within a round every cell runs on both sides back to back, and the order of the sides flips
each round, so that drift of the machine (thermal, background load) hits both sides alike.
Rounds come look by look (suite.judge.sequential): at each look, cells whose timing gates all
decided stop, the rest get more rounds, until the last look or the time budget. A killed A/B
resumes from its records: whole rounds are kept, a half-finished one is redone on both sides.
The rounds are suite/flows/rounds.py, the instruction counts before them suite/flows/counts.py;
this module prepares the sides, orders the phases and judges.
"""

from __future__ import annotations

import shlex
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from suite.core.decision_records import Cell, DecisionRecord, RollbackRecord
from suite.core.errors import EnvironmentProblem, InputError
from suite.core.loaded import LoadedRun
from suite.core.records import ROLES, Role, RunRecord
from suite.core.results import ALONE_DIR, read_run
from suite.core.secrets import redact_text
from suite.core.spec import CellSpec
from suite.execute.environment import RunOptions
from suite.execute.manifest import stat_differences, stat_snapshot
from suite.execute.prepared import PreparedSide
from suite.execute.progress import Progress
from suite.execute.runner import Run
from suite.execute.side_deps import resumed
from suite.flows.compare import decide
from suite.flows.counts import count_cells, counting_spent_s
from suite.flows.phases import Phases
from suite.flows.rollback import run_checks
from suite.flows.rounds import Rounds
from suite.flows.second_look import alone_design, cells_to_look_again
from suite.flows.traces import judge_with_traces
from suite.judge.decision import differences
from suite.judge.policy import Policy
from suite.judge.rollback import judge_rollback
from suite.judge.sequential import Design
from suite.workloads import Resolved
from suite.workloads.matrix import Matrix


@dataclass(frozen=True)
class AbOptions:
    out: Path
    rounds: int | None  # None: the policy's looks; N: a fixed design with one look at N
    timeout_s: float | None
    memory_limit_bytes: int | None
    progress: Progress | None
    traces: bool = True
    rollback: bool = True
    resume: bool = False
    count: bool = True  # the instructions gate's counting, where the policy names the gate
    keep_counts: bool = False  # counts kept across runs reused, and this run's kept (ab's default)
    second_look: bool = True  # a timing fail or improvement runs again alone before it stands
    job: str | None = None  # the plan's name of the bench job, recorded in both run.json
    reruns: int | None = None  # how often a disturbed round runs again (None: rounds.py's)


def side_command(matrix: Matrix, side: PreparedSide, resolved: dict[str, Resolved]) -> list[str]:
    """The plain run command equivalent to one side, for evidence and reproduction."""
    argv = ["torch-matrix", "run", "--python", side.interpreter, "--size", matrix.profile]
    if not matrix.file.startswith("<"):
        argv += ["--matrix", matrix.file]
    for ref in resolved:
        argv += ["--workload", ref]
    return argv


def design_for(policy: Policy, rounds: int | None) -> Design:
    return policy.design if rounds is None else policy.design.fixed(rounds)


def _identity(
    matrix: Matrix, cells: Sequence[CellSpec], policy: Policy, design: Design
) -> dict[str, Any]:
    """What a resumed A/B must share with the one it continues."""
    return {
        "matrix_sha256": matrix.sha256,
        "profile": matrix.profile,
        "policy_sha256": policy.sha256,
        "policy_profile": policy.profile,
        "looks": list(design.looks),
        "cells": [c.spec_hash for c in cells],
    }


def check_resumable(out: Path, identity: dict[str, Any]) -> None:
    """Refuse to resume an A/B under another matrix, policy, design or cell list."""
    for role in ("baseline", "candidate"):
        path = out / role / "run.json"
        if not path.is_file():
            continue
        recorded = (read_run(path).get("ab") or {}).get("identity")
        if recorded is None:
            raise InputError("was not written by torch-matrix ab; cannot resume it", file=str(path))
        for key, value in identity.items():
            if recorded.get(key) != value:
                raise InputError(
                    f"the A/B being resumed used another {key.replace('_', ' ')}; resume it with "
                    "the same matrix, cells, policy and --rounds, or start a new --out",
                    file=str(path),
                    path=f"$.ab.identity.{key}",
                )


def recorded_sides(out: Path, baseline: str, candidate: str | None) -> tuple[str, str]:
    """The sides an A/B in `out` ran with; a side given again must be the same one."""
    specs: dict[str, str] = {}
    for role, given in (("baseline", baseline), ("candidate", candidate)):
        path = out / role / "run.json"
        if not path.is_file():
            raise InputError("no A/B to resume here (no run.json)", file=str(path))
        spec = (read_run(path).get("ab") or {}).get("spec")
        if spec is None:
            raise InputError("was not written by torch-matrix ab; cannot resume it", file=str(path))
        if given is not None and given != spec and not (role == "baseline" and given == "current"):
            raise InputError(
                f"the A/B being resumed ran --{role} {spec}, not {given}", option=f"--{role}"
            )
        specs[role] = str(spec)
    return specs["baseline"], specs["candidate"]


def recorded_requirements(
    out: Path, given: Sequence[str], matrix: Sequence[str] = ()
) -> tuple[str, ...]:
    """The extra requirements (--with) the A/B in `out` prepared its sides with, beside the
    matrix's own `requirements:` (which the matrix, the same on a resume, brings again)."""
    ab = read_run(out / "baseline" / "run.json").get("ab") or {}
    recorded = [r for r in ab.get("with_requirements") or [] if r not in matrix]
    return resumed(recorded, given)


def run_ab(
    matrix: Matrix,
    cells: Sequence[CellSpec],
    resolved: dict[str, Resolved],
    baseline: PreparedSide,
    candidate: PreparedSide,
    policy: Policy,
    options: AbOptions,
) -> DecisionRecord:
    design = design_for(policy, options.rounds)
    identity = _identity(matrix, cells, policy, design)
    if options.resume:
        check_resumable(options.out, identity)
    phases = Phases({"prepare": baseline.prepared_s + candidate.prepared_s})
    phases.begin("setup")
    sides: dict[str, PreparedSide] = {"baseline": baseline, "candidate": candidate}
    make_runs = partial(_runs, matrix, resolved, sides, policy, options, identity)
    runs = make_runs(cells, design)
    comparable = not differences(runs["baseline"].environment, runs["candidate"].environment)
    wants = options.rollback and "rollback" in policy.gates
    checks = rollback_checks(matrix, cells, resolved, sides, runs, options) if wants else None
    charged, checked = 0.0, False
    if options.count and "instructions" in policy.gates:
        progress = options.progress
        threshold = policy.gates["instructions"].threshold
        charged, checked = count_before_rounds(
            cells, runs, sides, progress, phases, checks, threshold, options.keep_counts
        )
    rounds_of = partial(
        Rounds, policy=policy, comparable=comparable, progress=options.progress,
        before_round=venv_guard(baseline), reruns=options.reruns,
    )  # fmt: skip
    phases.begin("rounds")
    _run_rounds(rounds_of(runs, design=design, charged_s=charged), runs, cells)
    rollback_cells: list[Cell] = []
    rollback: RollbackRecord | None = None
    if checks is not None:
        if not checked:  # after the rounds, when there was no counting to run beside
            phases.begin("rollback")
            checks()
        rollback_cells, rollback = judge_rollback(options.out, policy)

    def judge(alone: bool = True, **more: Any) -> DecisionRecord:
        return decide(
            LoadedRun.load(options.out / "baseline", baseline.label, alone=alone),
            LoadedRun.load(options.out / "candidate", candidate.label, alone=alone),
            policy,
            extra_cells=rollback_cells,
            rollback=rollback,
            **more,
        )

    # The cells to look at again, from the rounds alone: a resumed A/B finishes the same look.
    decision = judge(alone=False)
    again = cells_to_look_again(decision, cells)
    if again:  # without one, the second look changes nothing: it judges fails alone
        if options.second_look:
            phases.begin("second look")
            look_design = alone_design(design)
            envs = {role: run.environment for role, run in runs.items()}
            alone = make_runs(again, look_design, ALONE_DIR, envs)
            _run_rounds(rounds_of(alone, design=look_design), alone, again)
        decision = judge()
    if options.traces:
        phases.begin("traces")
        decision = judge_with_traces(judge, decision, cells, runs, options.out)
    decision["phases"] = phases.done()
    if phases.overlapping:
        decision["phases_beside"] = dict(phases.overlapping)
    return decision


def venv_guard(side: PreparedSide) -> Callable[[], None] | None:
    """For a baseline that is a venv: a check, before every round it serves, that nothing in it
    changed since it was prepared (candidate code runs as the same user and could patch it
    between rounds); raises EnvironmentProblem naming what changed. None for another kind."""
    if side.kind != "requirement":
        return None
    venv = Path(side.interpreter).parent.parent
    before = stat_snapshot(venv)

    def check() -> None:
        found = stat_differences(venv, before)
        if found:
            more = f" (+{len(found) - 3} more)" if len(found) > 3 else ""
            raise EnvironmentProblem(
                f"the baseline's venv {venv} changed while the A/B ran: "
                f"{', '.join(found[:3])}{more}; no round runs on a patched baseline, and the "
                "venv is rebuilt on its next use"
            )

    return check


def _runs(
    matrix: Matrix,
    resolved: dict[str, Resolved],
    sides: dict[str, PreparedSide],
    policy: Policy,
    options: AbOptions,
    identity: dict[str, Any],
    cells: Sequence[CellSpec],
    design: Design,
    folder: str = "",
    environments: dict[str, dict[str, Any]] | None = None,
) -> dict[str, Run]:
    """Each side's run of these cells, in OUT/<role>/<folder>."""
    runs: dict[str, Run] = {}
    for role in ROLES:
        side = sides[role]
        run_options = _side_options(matrix, resolved, role, side, options, folder)
        extra = _side_extra(role, side, policy, identity, design, options.job)
        env = (environments or {}).get(role)
        runs[role] = Run(matrix, run_options, cells, resolved, environment=env, extra=extra)
    return runs


def _side_options(
    matrix: Matrix,
    resolved: dict[str, Resolved],
    role: str,
    side: PreparedSide,
    options: AbOptions,
    folder: str = "",
) -> RunOptions:
    """How one side runs: in its own folder, with its interpreter; rounds come from Rounds."""
    return RunOptions(
        out=options.out / role / folder if folder else options.out / role,
        interpreter=side.interpreter,
        resume=options.resume,
        timeout_s=options.timeout_s,
        memory_limit_bytes=options.memory_limit_bytes,
        rounds=(),
        command=side_command(matrix, side, resolved),
        progress=options.progress,
        launcher=side.launcher,
    )


def _side_extra(
    role: Role,
    side: PreparedSide,
    policy: Policy,
    identity: dict[str, Any],
    design: Design,
    job: str | None = None,
) -> RunRecord:
    """What one side's run.json holds beyond a plain run's: its side, the policy, the A/B."""
    ab: dict[str, Any] = {
        "spec": redact_text(side.spec),
        "identity": identity,
        "design": design.as_dict(),
    }
    if side.indexes:
        ab["indexes"] = {
            "index_url": redact_text(side.indexes.index_url or "") or None,
            "extra_index_urls": [redact_text(u) for u in side.indexes.extra_index_urls],
        }
    if side.with_requirements:
        ab["with_requirements"] = [redact_text(r) for r in side.with_requirements]
    if job is not None:
        ab["job"] = job
    extra: RunRecord = {
        "label": side.label,
        "side": role,
        "prepared_s": side.prepared_s,
        "policy": {"file": policy.file, "sha256": policy.sha256, "profile": policy.profile},
        "ab": ab,
    }
    if side.image is not None:
        extra["image"] = side.image
    return extra


def _run_rounds(rounds: Rounds, runs: dict[str, Run], cells: Sequence[CellSpec]) -> None:
    """The paired rounds; each run then records the design as it ended and finishes."""
    try:
        final = rounds.run(cells)
    except BaseException:
        for run in runs.values():
            run.finish("interrupted")
        raise
    finally:
        for run in runs.values():
            run.close()
    for run in runs.values():
        run.doc["ab"]["design"] = final.as_dict()
        run.finish()


def rollback_checks(
    matrix: Matrix,
    cells: Sequence[CellSpec],
    resolved: dict[str, Resolved],
    sides: dict[str, PreparedSide],
    runs: dict[str, Run],
    options: AbOptions,
) -> Callable[[], float]:
    """The rollback checks of this A/B, to run once; they return their wall seconds."""

    def checks() -> float:
        began = time.monotonic()
        if options.progress is not None:
            options.progress.note("rollback checks (checkpoints both ways, the rehearsal)")
        # Checks of a killed A/B are redone whole: their folders hold nothing worth keeping.
        for stale in ("rollback", "rehearsal"):
            shutil.rmtree(options.out / stale, ignore_errors=True)
        pairs = {role: (sides[role], runs[role]) for role in runs}
        run_checks(matrix, cells, resolved, pairs, options.out)
        return time.monotonic() - began

    return checks


def count_before_rounds(
    cells: Sequence[CellSpec],
    runs: dict[str, Run],
    sides: dict[str, PreparedSide],
    progress: Progress | None,
    phases: Phases,
    checks: Callable[[], float] | None,
    threshold: float | None = None,
    keep: bool = False,
) -> tuple[float, bool]:
    """The counting processes, before the rounds, with the rollback checks (when given) beside
    them: an instruction count does not depend on what else runs, a round's clock would; the
    counting yields the CPU (it runs at the lowest priority), so the checks' own figures are
    theirs. Returns the counting's wall time, charged to the rounds' budget, and whether the
    checks ran."""
    phases.begin("counting")
    try:
        beside_s = count_cells(
            cells, runs, sides, progress, beside=checks, threshold=threshold, keep=keep
        )
    except BaseException:
        for run in runs.values():
            run.finish("interrupted")
        raise
    if beside_s is not None:
        phases.beside("rollback", "counting", beside_s)
    return counting_spent_s(cells, runs), beside_s is not None


def describe(side: PreparedSide) -> str:
    return f"{redact_text(side.spec)} ({shlex.quote(side.interpreter)})"
