"""The vocabulary and the shapes of the suite's records, defined once.

Every status, verdict, decision and failure mode a record may hold is a `Literal` here (the
backends, which a plugin may add to, are a registry: suite/core/backends.py), and the tuples the
code iterates are read from those types; tests/test_records.py holds them equal to the enums of
schemas/*.json. The records are TypedDicts, not classes: they cross the process boundary as
JSON (a worker writes result.json, a CI job's artifact holds them, the comment job reads them
without the suite's types), the schemas check them where they are read, and a TypedDict is that
same JSON to the type checker, with nothing to convert on either side. Each record has one
builder, in the module that owns its file: `core.results.base_result` and `failure_result`
(result), `execute.runner.Run` (run), `judge.verdicts.gate_result` (gate),
`judge.decision.decision_record` (decision), `flows.calibrate.calibration` (calibration). A
run read back is `core.loaded.LoadedRun`, which also knows the folder its files lie in.
"""

from __future__ import annotations

from typing import Any, Literal, TypedDict, get_args

from suite.core.stats import Summary

Status = Literal["ok", "failed", "crashed", "timeout", "oom", "unsupported", "skipped"]
CellState = Literal[
    "pending", "ok", "failed", "crashed", "timeout", "oom", "unsupported", "skipped"
]  # fmt: skip
RunStatus = Literal["running", "complete", "interrupted"]
FailureMode = Literal[
    "exception", "unsupported", "oom", "signal", "timeout", "exit-code", "no-result",
    "unavailable", "dependency", "correctness", "interrupted", "source-changed",
]  # fmt: skip
Verdict = Literal[
    "pass", "fail", "improved", "inconclusive", "untested", "unsupported", "new-failure",
    "fixed", "not-comparable",
]  # fmt: skip
Decision = Literal["adopt", "isolate", "defer", "rollback"]
Severity = Literal["hard", "soft", "budget", "required", "info"]
Lane = Literal["production", "prototype"]
Undecided = Literal["noise", "budget", "rounds"]
Size = Literal["smoke", "full"]

STATUSES: tuple[Status, ...] = get_args(Status)
RUN_STATUSES: tuple[RunStatus, ...] = get_args(RunStatus)
FAILURE_MODES: tuple[FailureMode, ...] = get_args(FailureMode)
VERDICTS: tuple[Verdict, ...] = get_args(Verdict)
# Ordered: a row's decision is the worst (last) of its gates'.
DECISIONS: tuple[Decision, ...] = get_args(Decision)
SEVERITIES: tuple[Severity, ...] = get_args(Severity)
LANES: tuple[Lane, ...] = get_args(Lane)
SIZES: tuple[Size, ...] = get_args(Size)

# Statuses of a cell that ran and broke (as opposed to one that was skipped or unsupported).
FAILED_STATUSES: tuple[Status, ...] = ("failed", "crashed", "timeout", "oom")
UNDECIDED_WHY: dict[Undecided, str] = {
    "noise": "too noisy",
    "budget": "out of time",
    "rounds": "too few rounds",
}
EXIT_CODES: dict[Decision, int] = {"adopt": 0, "isolate": 4, "defer": 5, "rollback": 6}


class ImageRecord(TypedDict, total=False):
    """The image a docker side ran in, as its preparation resolved it (run.schema.json)."""

    reference: str
    digest: str
    digest_kind: Literal["repo-digest", "image-id"]
    id: str
    tag: str | None
    base: str | None
    base_digest: str | None
    backend: str | None
    torch: str | None
    suite: str | None
    revision: str | None
    source: str | None
    recipe: dict[str, Any] | None


class Failure(TypedDict):
    mode: FailureMode
    message: str


class AccuracyCheck(TypedDict, total=False):
    """One output's accuracy against an fp64 reference (suite/core/accuracy.py): passed when
    its RMSE is within k x the reference's own RMSE + tol."""

    label: str
    passed: bool
    dtype: str
    rmse_result: float
    rmse_reference: float
    k: float
    tol: float
    reference: str


class Correctness(AccuracyCheck, total=False):
    checks: list[AccuracyCheck]  # every output checked; the fields above are the worst's


class Moved(TypedDict):
    """A function whose instructions per step moved between the sides (the instructions gate)."""

    function: str
    baseline: int
    candidate: int
    change: int


class Disturbance(TypedDict):
    """What else ran on the worker's CPUs while it was timed (suite/worker/measure.py)."""

    other_cpus: float | None
    own_cpus: float | None
    spare_cpus: int | None
    disturbed: bool | None


class TimingRecord(TypedDict, total=False):
    """A worker's timed steady state. samples_s is the measurement; summary is a copy of its
    statistics for a reader of the file, never read back: every figure the suite judges is
    derived from samples_s on demand (suite/core/stats.py, timing_of)."""

    cold_start_s: float | None
    compile_s: float | None
    warmup_s: float | None
    warmup_iters: int
    samples_s: list[float]
    calls_per_sample: int
    summary: Summary
    disturbance: Disturbance | None


class ThroughputRecord(TypedDict):
    """Items per step; the rate is derived from the samples (suite/core/stats.py)."""

    unit: str
    items_per_iter: float
    value: float  # items/s at the median step, a copy for readers


class Result(TypedDict, total=False):
    """One round of one cell, as its worker (or the parent, for a worker that left none) wrote
    it. The keys of result.schema.json's `required` are always there."""

    kind: Literal["torch-matrix/result"]
    schema_version: int
    run_id: str
    cell_id: str
    spec: dict[str, Any]
    spec_hash: str
    round: int
    status: Status
    failure: Failure | None
    started_at: str
    finished_at: str
    wall_s: float
    torch: dict[str, Any] | None
    source: dict[str, Any] | None
    timing: TimingRecord | None
    noise: dict[str, Any] | None
    throughput: ThroughputRecord | None
    memory: dict[str, Any] | None
    correctness: Correctness | None
    metrics: dict[str, Any]
    fallback: dict[str, Any] | None
    harness: dict[str, Any] | None
    threads: dict[str, Any] | None
    image: ImageRecord | None
    ranks: list[dict[str, Any]]
    outputs: dict[str, Any] | None
    warnings: list[str]
    instructions: dict[str, Any] | None  # a counting process's (suite/execute/counting.py)
    process: dict[str, Any]
    disturbed_repeats: int


class _RunCellFields(TypedDict):
    cell_id: str
    status: CellState
    file: str
    wall_s: float | None
    round: int


class RunCell(_RunCellFields, total=False):
    sha256: str | None  # of the record file as written: --resume keeps only a file that has it


class RunRecord(TypedDict, total=False):
    """A run directory's run.json, kept current by `execute.runner.Run` after every cell."""

    kind: Literal["torch-matrix/run"]
    schema_version: int
    run_id: str
    status: RunStatus
    started_at: str
    finished_at: str | None
    resumed_at: list[str]
    command: list[str]
    cwd: str
    suite: dict[str, Any]
    matrix: MatrixEvidence
    profile: Size
    options: dict[str, Any]
    interpreter: str
    label: str
    side: Literal["baseline", "candidate"]
    policy: dict[str, Any]
    prepared_s: float
    environment: dict[str, Any]
    workloads: dict[str, dict[str, Any]]
    cells: list[RunCell]
    image: ImageRecord | None  # a docker side's image, as the parent prepared it
    ab: dict[str, Any]  # an A/B's rounds: the sequential design they ran under


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


class Comparable(TypedDict):
    ok: bool
    differences: list[Difference]


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
    runs: list[dict[str, Any]]  # aggregate: the job runs it joined


class MatrixEvidence(TypedDict):
    file: str
    sha256: str
    name: str


class PolicyEvidence(TypedDict, total=False):
    file: str
    sha256: str
    profile: str
    fleet_backends: list[str]
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
