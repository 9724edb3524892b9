"""The vocabulary and the shapes of the suite's records, defined once.

Every status, verdict, decision and failure mode a record may hold is a `Literal` here (the
backends, which a plugin may add to, are a registry: suite/core/backends.py), and the
tuples the code iterates are read from those types; tests/test_records.py holds them equal to
the enums of schemas/*.json. The TypedDicts give the records' shapes to the type checker: the
result a worker writes (result.schema.json), the run a parent keeps (run.schema.json) and the
decision an A/B ends in (decision.schema.json). Each record has one builder, in the module that
owns its file: `core.results.base_result` and `failure_result`, `execute.runner.Run`,
`judge.verdicts.gate_result`, `flows.compare.decision_record`.
"""

from __future__ import annotations

from typing import Any, Literal, TypedDict, get_args

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


class Failure(TypedDict):
    mode: FailureMode
    message: str


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
    timing: dict[str, Any] | None
    noise: dict[str, Any] | None
    throughput: dict[str, Any] | None
    memory: dict[str, Any] | None
    correctness: dict[str, Any] | None
    metrics: dict[str, Any]
    fallback: dict[str, Any] | None
    harness: dict[str, Any] | None
    threads: dict[str, Any] | None
    image: dict[str, Any] | None
    ranks: list[dict[str, Any]]
    outputs: dict[str, Any] | None
    warnings: list[str]


class RunCell(TypedDict):
    cell_id: str
    status: CellState
    file: str
    wall_s: float | None
    round: int


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
    matrix: dict[str, Any]
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
    moved: list[dict[str, Any]]  # the instructions gate: functions whose counts moved most


class Repro(TypedDict, total=False):
    command: str
    docker: str | None
    ab: str  # the paired comparison again (a timing or memory regression)
    build: dict[str, str]  # role -> the lines that build an image no registry holds
    root: str | None  # the results folder the lines are pasted in


class Cell(TypedDict):
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


class DecisionRecord(TypedDict, total=False):
    """decision.json: what `ab`, `compare` and `aggregate` end in."""

    kind: Literal["torch-matrix/decision"]
    schema_version: int
    decision: Decision
    reasons: list[str]
    generated_at: str
    matrix: dict[str, Any]
    policy: dict[str, Any]
    baseline: dict[str, Any]
    candidate: dict[str, Any]
    comparable: dict[str, Any]
    rollback: dict[str, Any]
    rows: list[Row]
    cells: list[Cell]
