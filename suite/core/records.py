"""The vocabulary of the suite's records, defined once, and the shapes of what a run records.

Every status, verdict, decision and failure mode a record may hold is a `Literal` here (the
backends, which a plugin may add to, are a registry: suite/core/backends.py), and the tuples the
code iterates are read from those types; tests/test_records.py holds them equal to the enums of
schemas/*.json. A worker's result and a run's run.json are here; what is judged from them (gate,
cell, row, decision, calibration) is in suite/core/decision_records.py.

The records are TypedDicts, not classes: they cross the process boundary as JSON (a worker
writes result.json, a CI job's artifact holds them, the comment job reads them without the
suite's types), the schemas check them where they are read, and a TypedDict is that same JSON
to the type checker, with nothing to convert on either side. Each record has one builder, in
the module that owns its file: `core.results.base_result` and `failure_result` (result),
`execute.run_dir.new_run_doc` (run), `judge.verdicts.gate_result` (gate),
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
Undecided = Literal["noise", "budget", "rounds", "unconfirmed"]
Size = Literal["smoke", "full"]
Role = Literal["baseline", "candidate"]
DigestKind = Literal["repo-digest", "image-id"]

STATUSES: tuple[Status, ...] = get_args(Status)
RUN_STATUSES: tuple[RunStatus, ...] = get_args(RunStatus)
FAILURE_MODES: tuple[FailureMode, ...] = get_args(FailureMode)
VERDICTS: tuple[Verdict, ...] = get_args(Verdict)
# Ordered: a row's decision is the worst (last) of its gates'.
DECISIONS: tuple[Decision, ...] = get_args(Decision)
SEVERITIES: tuple[Severity, ...] = get_args(Severity)
LANES: tuple[Lane, ...] = get_args(Lane)
SIZES: tuple[Size, ...] = get_args(Size)
ROLES: tuple[Role, ...] = get_args(Role)

# Statuses of a cell that ran and broke (as opposed to one that was skipped or unsupported).
FAILED_STATUSES: tuple[Status, ...] = ("failed", "crashed", "timeout", "oom")
UNDECIDED_WHY: dict[Undecided, str] = {
    "noise": "too noisy",
    "budget": "out of time",
    "rounds": "too few rounds",
    "unconfirmed": "not repeated alone",
}
EXIT_CODES: dict[Decision, int] = {"adopt": 0, "isolate": 4, "defer": 5, "rollback": 6}


class ImageRecord(TypedDict, total=False):
    """The image a docker side ran in, as its preparation resolved it (run.schema.json)."""

    reference: str
    digest: str
    digest_kind: DigestKind
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


class _FailureFields(TypedDict):
    mode: FailureMode
    message: str


class Failure(_FailureFields, total=False):
    """What stopped a cell: the mode the gates read, and what a reader needs to see why."""

    exception_type: str | None
    signal: str | None
    exit_code: int | None
    stderr_tail: str | None


class _Accuracy(TypedDict, total=False):
    passed: bool
    dtype: str
    rmse_result: float
    rmse_reference: float
    k: float
    tol: float
    reference: str


class AccuracyCheck(_Accuracy, total=False):
    """One output's accuracy against an fp64 reference (suite/core/accuracy.py): passed when
    its RMSE is within k x the reference's own RMSE + tol."""

    label: str


class Correctness(_Accuracy, total=False):
    """A cell's accuracy: passed when every output is; the other fields are the worst's."""

    checks: list[AccuracyCheck]


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
    over_ranks: dict[str, Any]  # a distributed cell: samples_s is the worst rank's


class ThroughputRecord(TypedDict):
    """Items per step; the rate is derived from the samples (suite/core/stats.py)."""

    unit: str
    items_per_iter: float
    value: float  # items/s at the median step, a copy for readers


class TorchInfo(TypedDict, total=False):
    """The torch a worker imported."""

    version: str
    git_version: str | None


class SourceRecord(TypedDict, total=False):
    """The workload a cell ran: its module, object, and the file with its sha256 as it ran."""

    module: str
    object: str
    file: str | None
    sha256: str | None


# Peak memory of the memory pass (suite/worker/measure.py), above its starting baseline; the
# functional form because one key, "pass", is a Python keyword.
MemoryRecord = TypedDict(
    "MemoryRecord",
    {
        "method": str,
        "baseline_bytes": int | None,
        "peak_bytes": int,
        "samples": int,
        "pass": Literal["memory"],
        "calls": int,
        # cpu-allocator: the RSS peak of the same region, advisory (it moves with the C
        # allocator's arenas and pages, so no gate reads it)
        "rss_peak_bytes": int,
        # a distributed cell: peak_bytes is the worst rank's (suite/worker/worst_rank.py)
        "over_ranks": dict[str, Any],
    },
    total=False,
)


class NoiseRecord(TypedDict, total=False):
    """The worker's own grade of its samples' spread (a copy; the gates derive their own)."""

    relative_iqr: float
    grade: Literal["ok", "noisy"]
    threshold: float
    samples: int
    low_samples: bool


class FallbackRecord(TypedDict, total=False):
    """Ops that ran on the CPU instead of the backend (MPS, or a workload's own word)."""

    enabled: bool
    happened: bool
    messages: list[str]


class HarnessRecord(TypedDict, total=False):
    """Where a worker's wall time went, and whether it was forked from a server."""

    worker_wall_s: float
    parent_wall_s: float
    import_s: float
    workload_s: float
    timed_s: float
    timer_overhead_s: float
    forked: bool
    counted_wall_s: float  # a count kept from an earlier run: what counting it cost then


class ThreadsRecord(TypedDict, total=False):
    """How the timed samples were threaded."""

    intra_op: int
    inter_op: int
    affinity: list[int] | None
    env: dict[str, str]


class ProcessRecord(TypedDict, total=False):
    """Process-level settings the worker ran with, as it read them (none is changed)."""

    hash_seed: str | None
    aslr: bool | None
    transparent_hugepages: str | None
    affinity: list[int] | None


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
    torch: TorchInfo | None
    source: SourceRecord | None
    timing: TimingRecord | None
    noise: NoiseRecord | None
    throughput: ThroughputRecord | None
    memory: MemoryRecord | None
    correctness: Correctness | None
    metrics: dict[str, Any]
    fallback: FallbackRecord | None
    imports: dict[str, str]  # the workload's libraries: distribution -> version
    loss_curve: dict[str, Any]  # ctx.loss_curve: values per step, an fp64 reference or None
    model: dict[str, Any]  # ctx.model: class, parameter counts, config and its digest
    exports: dict[str, dict[str, Any]]  # ctx.export_path: path -> ok, error, max_abs_error
    harness: HarnessRecord | None
    threads: ThreadsRecord | None
    image: ImageRecord | None
    ranks: list[dict[str, Any]]
    hang: dict[str, Any]  # a distributed cell that timed out (suite/execute/forensics.py)
    # A cell on several nodes: its launcher, rendezvous and each node's agent's end.
    placement: dict[str, Any]
    outputs: dict[str, Any] | None
    warnings: list[str]
    instructions: dict[str, Any] | None  # a counting process's (suite/execute/counting.py)
    process: ProcessRecord
    disturbed_repeats: int


class _RunCellFields(TypedDict):
    cell_id: str
    status: CellState
    file: str
    wall_s: float | None
    round: int


class RunCell(_RunCellFields, total=False):
    sha256: str | None  # of the record file as written: --resume keeps only a file that has it
    disturbed: list[str]  # the records of this round set aside as disturbed, then rerun


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
    side: Role
    policy: dict[str, Any]
    prepared_s: float
    environment: dict[str, Any]
    workloads: dict[str, dict[str, Any]]
    cells: list[RunCell]
    image: ImageRecord | None  # a docker side's image, as the parent prepared it
    ab: dict[str, Any]  # an A/B's rounds: the sequential design they ran under


class MatrixEvidence(TypedDict):
    file: str
    sha256: str
    name: str
