"""The shapes of what is judged: a gate's verdict, a cell and a row of the decision,
decision.json itself and calibration.json (suite/core/records.py holds the vocabulary and what
a run records). TypedDicts for the reason records.py gives."""

from __future__ import annotations

from typing import Any, Literal, TypedDict

from suite.core.records import (
    Decision,
    ImageRecord,
    Lane,
    MatrixEvidence,
    Severity,
    Status,
    Undecided,
    Verdict,
)


class Moved(TypedDict):
    """A function whose instructions per step moved between the sides (the instructions gate)."""

    function: str
    baseline: int
    candidate: int
    change: int


class SecondLook(TypedDict, total=False):
    """A timing fail or improvement looked at again: the cell alone (suite/judge/second_look.py)."""

    verdict: Verdict
    message: str
    change: float | None
    ci: list[float] | None
    rounds: int | None


class GateRecord(TypedDict, total=False):
    """One gate's verdict on one cell; `decision` is added when the policy's rules are applied."""

    gate: str
    verdict: Verdict
    severity: Severity
    required: bool
    message: str
    unit: str | None
    baseline: float | str | bool | None
    candidate: float | str | bool | None
    change: float | None
    ci: list[float] | None
    p_value: float | None
    threshold: float | None
    rounds: int | None
    spread: float | None
    needed_rounds: int | None
    undecided: Undecided | None
    decision: Decision
    moved: list[Moved]  # the instructions gate: functions whose counts moved most
    second_look: SecondLook  # a timing fail or improvement, looked at again alone


class Repro(TypedDict, total=False):
    command: str
    docker: str | None
    ab: str  # the paired comparison again (a timing or memory regression)
    build: dict[str, str]  # role -> the lines that build an image no registry holds
    root: str | None  # the results folder the lines are pasted in


class OpChange(TypedDict):
    """One op's row in the ranking: both sides' self time and calls, and the change."""

    op: str
    kind: str
    baseline_us: float
    candidate_us: float
    change_us: float
    baseline_calls: int
    candidate_calls: int


class _CellFields(TypedDict):
    cell_id: str
    row_id: str
    workload: str
    backend: str
    lane: Lane
    baseline_status: Status | None
    candidate_status: Status | None
    gates: list[GateRecord]
    repro: Repro | None
    artifacts: dict[str, str]


class Cell(_CellFields, total=False):
    """One cell of the decision; an A/B whose timing failed adds the op-level diff."""

    ops: list[OpChange]  # report/opdiff.py
    ops_warning: str
    model: dict[str, Any]  # ctx.model, without its config (suite/judge/models.py)
    loss_curves: dict[str, list[float | None] | None]  # ctx.loss_curve of each side


class Row(TypedDict):
    row_id: str
    workload: str
    backend: str
    lane: Lane
    fleet: bool
    isolatable: bool
    decision: Decision
    reasons: list[str]
    verdicts: dict[str, int]


class Difference(TypedDict):
    """A field other than torch that differs between the two sides' environments."""

    field: str
    baseline: Any
    candidate: Any


class PackageDifference(TypedDict):
    """A library the workloads imported at another version (or on one side only)."""

    name: str
    baseline: str | None
    candidate: str | None
    cells: int


class _ComparableKeys(TypedDict):
    ok: bool
    differences: list[Difference]


class Comparable(_ComparableKeys, total=False):
    packages: list[PackageDifference]  # the workloads' libraries, where they differ


class SideEvidence(TypedDict, total=False):
    """One side as the decision names it (core.loaded.LoadedRun.evidence, or a CI job's)."""

    label: str
    run_id: str
    torch: str
    git_version: str | None
    dir: str
    interpreter: str | None
    image: ImageRecord | None
    rounds: int


class PolicyEvidence(TypedDict, total=False):
    file: str
    sha256: str
    profile: str
    fleet_backends: list[str]
    requires: list[str]  # rows that must have evidence (suite/judge/missing.py)
    mismatches: list[str]  # runs captured under a different policy hash


class RollbackRecord(TypedDict, total=False):
    """What getting back to the baseline took, and the checkpoint reports both ways."""

    duration_s: float
    environment_ready_s: float
    rehearsal_s: float
    checkpoints: dict[str, Any]
    jobs: dict[str, RollbackRecord]  # per CI job, when aggregated


class Source(TypedDict, total=False):
    base_sha: str
    head_sha: str
    run_url: str


class DecisionRecord(TypedDict, total=False):
    """decision.json: what `ab`, `compare` and `aggregate` end in."""

    kind: Literal["torch-matrix/decision"]
    schema_version: int
    decision: Decision
    reasons: list[str]
    generated_at: str
    matrix: MatrixEvidence
    policy: PolicyEvidence
    baseline: SideEvidence
    candidate: SideEvidence
    comparable: Comparable
    rollback: RollbackRecord
    rows: list[Row]
    cells: list[Cell]
    source: Source  # aggregate: the base and head commits, the run's link
    phases: dict[str, Any]
    phases_beside: dict[str, Any]


class RunnerIdentity(TypedDict, total=False):
    """Who measured an A/A: the machine, its torch and interpreter, its usable backends."""

    hostname: str | None
    cpu_model: str | None
    logical_cores: int | None
    torch: str
    interpreter: str | None
    python: str | None
    backends: list[str]


class CalibrationGate(TypedDict):
    """One timing gate's A/A figures: how far the pin's rounds spread, what they resolve."""

    spread: float | None
    mean: float
    rounds: int
    threshold: float
    min_detectable: float | None
    rounds_needed: int | None


class CalibrationCell(TypedDict):
    cell_id: str
    status: str
    round_wall_s: float | None
    gates: dict[str, CalibrationGate]


class CalibrationRecord(TypedDict):
    """calibration.json: what `calibrate` measured (calibration.schema.json)."""

    kind: Literal["torch-matrix/calibration"]
    schema_version: int
    created_at: str
    runner: RunnerIdentity
    policy: PolicyEvidence
    design: dict[str, Any]
    rounds: int
    resolvable_rounds: int | None
    cells: list[CalibrationCell]
