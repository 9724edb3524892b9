"""A/B: the same cells on a baseline and a candidate side, in interleaved paired rounds.

Within a round every cell runs on both sides back to back, and the order of the sides flips
each round, so that drift of the machine (thermal, background load) hits both sides alike.
Rounds come look by look (suite.judge.sequential): at each look, cells whose timing gates all
decided stop, the rest get more rounds, until the last look or the time budget. A killed A/B
resumes from its records: whole rounds are kept, a half-finished one is redone on both sides.
"""

from __future__ import annotations

import math
import shlex
import shutil
import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

from suite.core.errors import InputError
from suite.core.loaded import LoadedRun
from suite.core.records import Cell, DecisionRecord, RollbackRecord
from suite.core.results import disturbed, read_result, read_run, record_wall_s
from suite.core.secrets import redact_text
from suite.core.spec import CellSpec
from suite.execute.counting import Counter, count_file, countable
from suite.execute.environment import RunOptions
from suite.execute.progress import Progress
from suite.execute.runner import Run
from suite.execute.sides import PreparedSide
from suite.flows.compare import decide
from suite.flows.rollback import run_checks
from suite.judge.decision import differences
from suite.judge.gates import paired_rounds, side_status, timing_verdict
from suite.judge.instructions import REPLICATES
from suite.judge.policy import Policy
from suite.judge.registry import PERFORMANCE_GATES
from suite.judge.rollback import judge_rollback
from suite.judge.sequential import TIMING_GATES, Design
from suite.report.opdiff import op_diff
from suite.workloads import Resolved
from suite.workloads.matrix import Matrix

T = TypeVar("T")


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


def spent_s(runs: dict[str, Run]) -> float:
    """Worker wall time the rounds have used so far, read from the records: a resumed A/B
    charges its budget exactly as the uninterrupted one would."""
    return sum(run.spent_s() for run in runs.values())


# How often one round runs again when another process disturbed it: a runner busy for longer
# is busy, and its rounds are then left out of the timing gates, which say so.
DISTURBED_REPEATS = 3


class Rounds:
    """Interleaved paired rounds of every cell that still needs them, look by look."""

    def __init__(self, runs: dict[str, Run], policy: Policy, design: Design, comparable: bool,
                 progress: Progress | None, charged_s: float = 0.0) -> None:  # fmt: skip
        self.runs = runs
        self.charged_s = charged_s  # spent before the rounds (counting), out of the same budget
        self.policy = policy
        self.design = design
        self.comparable = comparable
        self.progress = progress
        self.budget_exhausted = False
        self.rounds_run: dict[str, int] = {}

    def pair(self, spec: CellSpec, round_no: int) -> None:
        """Both sides of one round of one cell; on resume a round is kept only when both
        sides' records are whole, otherwise it is redone on both. A round another process
        disturbed on either side runs again on both, the order kept, up to DISTURBED_REPEATS
        times; the kept records say how often."""
        order = ("baseline", "candidate") if round_no % 2 == 0 else ("candidate", "baseline")
        kept = {role: self.runs[role].reusable(spec, round_no) for role in order}
        if not all(kept.values()):
            for role in order:
                self.runs[role].discard(spec, round_no)
        repeats = 0
        while True:
            docs, kept_again = {}, False
            for role in order:
                doc, reused = self.runs[role].execute(spec, round_no)
                docs[role], kept_again = doc, kept_again or reused
                if self.progress is not None:
                    label = f"{spec.cell_id} [{role} r{round_no}{'+' * repeats}]"
                    self.progress.finished(label, doc, reused=reused)
            # A round kept on resume was settled when it ran: its reruns happened then.
            calm = not any(disturbed(d) for d in docs.values())
            if calm or kept_again or repeats == DISTURBED_REPEATS:
                break
            if self.progress is not None:
                self.progress.note(f"{spec.cell_id} r{round_no} disturbed by another process")
            for role in order:
                self.runs[role].set_aside(spec, round_no)
            repeats += 1
        if repeats:
            for role in order:
                self.runs[role].annotate(spec, round_no, disturbed_repeats=repeats)
        self.rounds_run[spec.cell_id] = round_no + 1

    def needs_more(self, spec: CellSpec) -> bool:
        base = self.runs["baseline"].records(spec)
        cand = self.runs["candidate"].records(spec)
        if not self.comparable or any(side_status(x) != "ok" for x in (base, cand)):
            return False  # no timing verdict can come from more rounds
        for name in TIMING_GATES:
            gate = self.policy.gates.get(name)
            if gate is None or gate.threshold is None:
                continue
            verdict = timing_verdict(gate, base, cand, self.design)
            if verdict is not None and verdict.outcome == "continue":
                return True
        # No paired round yet because every one so far stayed disturbed: later ones may not be.
        unpaired = not paired_rounds("latency_p50", base, cand)[2]
        return unpaired and any(disturbed(r) for r in (*base, *cand))

    def round_cost_s(self, spec: CellSpec) -> float | None:
        """Mean wall time of one round of this cell (both sides), from its records so far."""
        walls = [record_wall_s(r) for role in self.runs for r in self.runs[role].records(spec)]
        rounds = len(self.runs["baseline"].records(spec))
        return sum(walls) / rounds if rounds else None

    def affordable(self, active: list[CellSpec], rounds_to_look: int) -> list[CellSpec]:
        """The cells whose rounds up to the next look still fit the budget, cheapest first:
        an expensive cell (a compiled one) that cannot reach its look gives way to cheap
        cells that can. The costs come from the records, so a resumed A/B chooses the same."""
        if self.design.budget_s is None:
            return active
        left = self.design.budget_s - spent_s(self.runs) - self.charged_s
        costs = {spec.cell_id: self.round_cost_s(spec) for spec in active}
        if any(cost is None for cost in costs.values()):
            # Every cell gets its first round, whatever counting spent: it measures what a
            # round costs, and without it a cell has no status at all.
            return active
        if left <= 0:
            self.budget_exhausted = True
            return []
        admitted: set[str] = set()
        total = 0.0
        for spec in sorted(active, key=lambda s: costs[s.cell_id] or 0.0):
            need = (costs[spec.cell_id] or 0.0) * rounds_to_look
            if total + need <= left:
                admitted.add(spec.cell_id)
                total += need
        if len(admitted) < len(active):
            self.budget_exhausted = True
        return [spec for spec in active if spec.cell_id in admitted]

    def run(self, cells: Sequence[CellSpec]) -> Design:
        active = list(cells)
        done = 0
        for look in self.design.looks:
            while done < look and active:
                active = self.affordable(active, look - done)
                if not active:
                    break
                if self.progress is not None:
                    self.progress.total = max(
                        self.progress.total, self.progress.done_count + 2 * len(active)
                    )
                for spec in active:
                    self.pair(spec, done)
                done += 1
                # Decisions come only at looks, so between looks this drops only the cells
                # that cannot give a timing verdict at all (failed, skipped, unsupported).
                active = [spec for spec in active if self.needs_more(spec)]
            if not active:
                break
        return replace(self.design, budget_exhausted=self.budget_exhausted)


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
    sides = {"baseline": baseline, "candidate": candidate}
    runs: dict[str, Run] = {}
    for role, side in sides.items():
        run_options = _side_options(matrix, resolved, role, side, options)
        extra = _side_extra(role, side, policy, identity, design)
        runs[role] = Run(matrix, options=run_options, cells=cells, resolved=resolved, extra=extra)
    comparable = not differences(runs["baseline"].environment, runs["candidate"].environment)
    checks = None
    if options.rollback and "rollback" in policy.gates:
        checks = rollback_checks(matrix, cells, resolved, sides, runs, options)
    charged, checked = 0.0, False
    if options.count and "instructions" in policy.gates:
        progress = options.progress
        charged, checked = count_before_rounds(cells, runs, sides, progress, phases, checks)
    rounds = Rounds(runs, policy, design, comparable, options.progress, charged_s=charged)
    phases.begin("rounds")
    _run_rounds(rounds, runs, cells)
    rollback_cells: list[Cell] = []
    rollback: RollbackRecord | None = None
    if checks is not None:
        if not checked:  # after the rounds, when no counting left a core for them
            phases.begin("rollback")
            checks()
        rollback_cells, rollback = judge_rollback(options.out, policy)
    judge = partial(
        decide,
        LoadedRun.load(options.out / "baseline", baseline.label),
        LoadedRun.load(options.out / "candidate", candidate.label),
        policy,
        extra_cells=rollback_cells,
        rollback=rollback,
    )
    decision = judge()
    if options.traces:
        phases.begin("traces")
        decision = _judge_with_traces(judge, decision, cells, runs, options.out)
    decision["phases"] = phases.done()
    if phases.overlapping:
        decision["phases_beside"] = dict(phases.overlapping)
    return decision


def _side_options(
    matrix: Matrix,
    resolved: dict[str, Resolved],
    role: str,
    side: PreparedSide,
    options: AbOptions,
) -> RunOptions:
    """How one side runs: in its own folder, with its interpreter; rounds come from Rounds."""
    return RunOptions(
        out=options.out / role,
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
    role: str,
    side: PreparedSide,
    policy: Policy,
    identity: dict[str, Any],
    design: Design,
) -> dict[str, Any]:
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
    extra = {
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


def _judge_with_traces(
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
) -> tuple[float, bool]:
    """The counting processes, before the rounds, with the rollback checks (when given) on the
    core that the side done counting first leaves idle: an instruction count does not depend
    on what else runs, a round's clock would. Returns the counting's wall time, charged to the
    rounds' budget, and whether the checks ran."""
    phases.begin("counting")
    try:
        beside_s = count_cells(cells, runs, sides, progress, then=checks)
    except BaseException:
        for run in runs.values():
            run.finish("interrupted")
        raise
    if beside_s is not None:
        phases.beside("rollback", "counting", beside_s)
    return counting_spent_s(cells, runs), beside_s is not None


class Phases:
    """Wall seconds of each phase of an A/B, in the order they ran: where its time went. A
    phase that ran beside another is named in `overlapping`, with the one it ran beside."""

    def __init__(self, known: dict[str, float]) -> None:
        self.seconds = {name: round(value, 1) for name, value in known.items()}
        self.overlapping: dict[str, str] = {}
        self._current: tuple[str, float] | None = None

    def beside(self, name: str, other: str, seconds: float) -> None:
        self.seconds[name] = round(seconds, 1)
        self.overlapping[name] = other

    def begin(self, name: str) -> None:
        self._end()
        self._current = (name, time.monotonic())

    def _end(self) -> None:
        if self._current is not None:
            name, began = self._current
            self.seconds[name] = round(self.seconds.get(name, 0.0) + time.monotonic() - began, 1)
            self._current = None

    def done(self) -> dict[str, float]:
        self._end()
        return dict(self.seconds)


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


def count_cells(
    cells: Sequence[CellSpec],
    runs: dict[str, Run],
    sides: dict[str, PreparedSide],
    progress: Progress | None,
    then: Callable[[], T] | None = None,
) -> T | None:
    """The counting processes of the instructions gate, before the rounds, for every countable
    cell: REPLICATES per side. The two sides count at once, one thread each (a count runs on
    one thread, and instructions do not depend on what else runs). A record already counted
    (a resumed A/B) stays. `then` starts when the first side is done, beside the other side's
    counting; what it returns is returned."""
    todo = [spec for spec in cells if countable(spec)]

    def count_side(role: str) -> None:
        run = runs[role]
        counter = Counter(
            run.dir,
            run.options.interpreter,
            run.worker_env,
            run.options.launcher,
            in_container=sides[role].kind == "docker",
        )
        try:
            for spec in todo:
                for replicate in range(REPLICATES):
                    if _counted(count_file(run.dir, spec, replicate), spec):
                        continue
                    if progress is not None:
                        progress.note(f"counting {spec.cell_id} [{role} c{replicate}]")
                    counter.count(spec, run.run_id, replicate)
        finally:
            counter.close()

    return side_by_side([partial(count_side, role) for role in runs], then)


def side_by_side(tasks: Sequence[Callable[[], None]], then: Callable[[], T] | None) -> T | None:
    """The tasks at once, and `then` once the first of them has finished without an error, on
    the thread it leaves; every task's error is raised, after `then` is done."""
    with ThreadPoolExecutor(max_workers=len(tasks) + 1) as pool:
        started = [pool.submit(task) for task in tasks]
        after = None
        if then is not None:
            first, _ = wait(started, return_when=FIRST_COMPLETED)
            if all(done.exception() is None for done in first):
                after = pool.submit(then)
        try:
            for done in started:
                done.result()
        finally:
            result = after.result() if after is not None else None
        return result


def counting_spent_s(cells: Sequence[CellSpec], runs: dict[str, Run]) -> float:
    """The wall time counting took, read from the count records: the sides count at once, so
    the longer side's sum. Charged to the rounds' budget, the same when an A/B resumes."""
    per_side = []
    for run in runs.values():
        walls = []
        for spec in cells:
            for replicate in range(REPLICATES):
                try:
                    walls.append(record_wall_s(read_result(count_file(run.dir, spec, replicate))))
                except (InputError, OSError):
                    continue
        per_side.append(math.fsum(walls))
    return max(per_side, default=0.0)


def _counted(path: Path, spec: CellSpec) -> bool:
    try:
        doc = read_result(path)
    except (InputError, OSError):
        return False
    return bool(doc["spec_hash"] == spec.spec_hash and doc["status"] == "ok")


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


def describe(side: PreparedSide) -> str:
    return f"{redact_text(side.spec)} ({shlex.quote(side.interpreter)})"
