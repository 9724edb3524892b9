"""Timing of a callable: cold start, warmup and steady-state samples, kept apart.

The clock is injectable so that the loop logic can be tested without real time passing, and so
is the CPU reading that tells whether another process competed for this worker's CPUs during
the timed region (a disturbed round, which the A/B repeats instead of averaging it in).
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from suite.core.records import Disturbance, TimingRecord

Clock = Callable[[], int]  # monotonic nanoseconds


@dataclass(frozen=True)
class CpuReading:
    """Busy seconds of the CPUs this process may run on (all processes, /proc/stat, steal
    included), and this process's own CPU seconds, at one instant."""

    busy_s: float
    own_s: float
    cpus: int


CpuSampler = Callable[[], CpuReading | None]
# Other processes using more than this many CPUs beyond what the worker's threads leave spare,
# on average over the timed region, make the round disturbed: on a 2-core runner one busy
# process beside a two-thread worker made every op wait a scheduler slice (0.5 ms -> 8 ms).
DISTURBED_CPUS = 0.25
# /proc/stat's cpuN fields: user nice system idle iowait irq softirq steal; idle and iowait
# are not busy.
_BUSY_FIELDS = (0, 1, 2, 5, 6, 7)


# torchrun gives every rank of one cell (every node's, every round's own rendezvous) this
# variable, with the same value: the processes that carry it are the cell's own, not others.
_CELL_RUN_VAR = "TORCHELASTIC_RUN_ID"


def _process_cpu_s(pid: str, tick: int) -> float:
    """User plus system seconds of PID so far; 0 when it is gone or cannot be read."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / tick
    except (OSError, IndexError, ValueError):
        return 0.0


def cell_cpu_s(tick: int) -> float:
    """CPU seconds of this cell's own processes: every rank of it on this host (one node's, or
    every node's where a local launcher placed them all here) — found by the run id torchrun
    gave them — else this process's alone."""
    run_id = os.environ.get(_CELL_RUN_VAR)
    if not run_id:
        return time.process_time()
    wanted = b"\0" + f"{_CELL_RUN_VAR}={run_id}".encode() + b"\0"
    total = 0.0
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as environ:
                carries = wanted in b"\0" + environ.read() + b"\0"
        except OSError:
            continue
        if carries:
            total += _process_cpu_s(pid, tick)
    return total or time.process_time()


def cpu_reading() -> CpuReading | None:
    """The CPU reading of this process's allowed CPUs; None where /proc/stat is not there.
    Own seconds are the cell's: on a two-core runner a cell's ranks keep each other busy."""
    try:
        allowed = os.sched_getaffinity(0)
        with open("/proc/stat", encoding="ascii") as stat:
            lines = stat.read().splitlines()
    except (OSError, AttributeError):
        return None
    tick = os.sysconf("SC_CLK_TCK")
    busy = 0
    for line in lines:
        name, *fields = line.split()
        if name.startswith("cpu") and name[3:].isdigit() and int(name[3:]) in allowed:
            values = [int(f) for f in fields]
            busy += sum(values[i] for i in _BUSY_FIELDS if i < len(values))
    return CpuReading(busy / tick, cell_cpu_s(tick), len(allowed))


def disturbance(
    before: CpuReading | None, after: CpuReading | None, wall_s: float, threads: int
) -> Disturbance:
    """What else ran on this worker's CPUs while it was timed: other processes' CPUs on
    average (busy minus own, over the wall time), and whether that exceeds what the worker's
    threads leave spare by more than DISTURBED_CPUS. Unmeasured (None) is never disturbed."""
    if before is None or after is None or wall_s <= 0:
        return {"other_cpus": None, "own_cpus": None, "spare_cpus": None, "disturbed": None}
    own = max(0.0, after.own_s - before.own_s) / wall_s
    other = max(0.0, (after.busy_s - before.busy_s) - (after.own_s - before.own_s)) / wall_s
    spare = max(0, after.cpus - threads)
    return {
        "other_cpus": round(other, 3),
        "own_cpus": round(own, 3),
        "spare_cpus": spare,
        "disturbed": other > spare + DISTURBED_CPUS,
    }


@dataclass(frozen=True)
class Budget:
    """How long to measure. Sampling stops once both minimums are met, or at either maximum."""

    warmup_iters: int
    min_iters: int
    max_iters: int
    min_time_s: float
    max_time_s: float
    # A sample times a block of calls lasting at least this long (the per-call time is the
    # block's mean): sub-millisecond kernels timed one call at a time spread by scheduler
    # jitter alone, and their noise would hide any real change. 0 times single calls.
    min_sample_s: float = 0.0


# Enough samples per process for a stable statistic: aim for min_iters (200), and past
# max_time_s stop only once FLOOR_SAMPLES are in. Blocks of calls keep short kernels above
# timer and scheduler jitter.
BUDGETS: dict[str, Budget] = {
    "smoke": Budget(
        warmup_iters=3,
        min_iters=200,
        max_iters=2000,
        min_time_s=0.2,
        max_time_s=0.6,
        min_sample_s=0.002,
    ),
    "full": Budget(
        warmup_iters=10,
        min_iters=200,
        max_iters=10000,
        min_time_s=2.0,
        max_time_s=10.0,
        min_sample_s=0.01,
    ),
}
FLOOR_SAMPLES = 20
# Calls in the separate peak-memory pass, after the timed samples.
MEMORY_PASS_CALLS = 3
MAX_CALLS_PER_SAMPLE = 10_000


@dataclass
class Timing:
    cold_start_s: float | None = None
    compile_s: float | None = None
    warmup_s: float | None = None
    warmup_iters: int = 0
    samples_s: list[float] = field(default_factory=list)
    timed_s: float = 0.0
    calls_per_sample: int = 1
    disturbance: Disturbance | None = None

    def as_dict(self) -> TimingRecord:
        from suite.core.stats import summarize

        return {
            "cold_start_s": self.cold_start_s,
            "compile_s": self.compile_s,
            "warmup_s": self.warmup_s,
            "warmup_iters": self.warmup_iters,
            "samples_s": self.samples_s,
            "calls_per_sample": self.calls_per_sample,
            "summary": summarize(self.samples_s),
            "disturbance": self.disturbance,
        }


def time_block(fn: Callable[[], Any], sync: Callable[[], None], clock: Clock, calls: int) -> float:
    """Mean seconds per call over a synchronized block of calls."""
    sync()
    start = clock()
    for _ in range(calls):
        fn()
    sync()
    return (clock() - start) / 1e9 / calls


def calls_per_sample(one_call_s: float, budget: Budget) -> int:
    if budget.min_sample_s <= 0 or one_call_s >= budget.min_sample_s:
        return 1
    return min(MAX_CALLS_PER_SAMPLE, math.ceil(budget.min_sample_s / max(one_call_s, 1e-9)))


def planned_samples(sample_s: float, budget: Budget, floor: int = FLOOR_SAMPLES) -> int:
    """The samples run_timed's stopping rule would take were every sample SAMPLE_S long: both
    minimums met, or either maximum (past max_time_s, once the floor is in)."""
    per = max(sample_s, 1e-9)

    def samples_in(seconds: float) -> int:
        return math.ceil(seconds / per - 1e-9)  # 0.5 s of 10 ms samples is 50, not 51

    enough = max(budget.min_iters, samples_in(budget.min_time_s))
    out_of_time = max(min(floor, budget.max_iters), samples_in(budget.max_time_s))
    return max(1, min(budget.max_iters, enough, out_of_time))


def time_call(fn: Callable[[], Any], sync: Callable[[], None], clock: Clock) -> float:
    """One synchronized call, in seconds."""
    sync()
    start = clock()
    fn()
    sync()
    return (clock() - start) / 1e9


def run_timed(
    fn: Callable[[], Any],
    sync: Callable[[], None],
    budget: Budget,
    *,
    clock: Clock = time.perf_counter_ns,
    compiled: bool = False,
    floor: int = FLOOR_SAMPLES,
    cpu: CpuSampler = cpu_reading,
    threads: int = 1,
    agree: Callable[[int], int] | None = None,
) -> Timing:
    """Cold call, warmup, then samples of synchronized blocks of calls. Nothing else runs in
    the timed region: memory instruments have a pass of their own (memory_pass).

    With `agree` (the ranks of one cell), the number of samples is fixed before the first:
    planned_samples from the warmup, passed to agree, which returns the number every rank
    takes; a limit read on each rank's own clock would let one rank start a collective that
    the others never join."""
    timing = Timing()
    timing.cold_start_s = time_call(fn, sync, clock)
    if compiled:
        timing.compile_s = timing.cold_start_s
    warm_start = clock()
    warm = [time_call(fn, sync, clock) for _ in range(budget.warmup_iters)]
    timing.warmup_iters = budget.warmup_iters
    timing.warmup_s = (clock() - warm_start) / 1e9
    one_call_s = min(warm, default=timing.cold_start_s)
    # Ranks time one call a sample: blocks sized on each rank's own clock would differ in
    # calls, and a rank would wait in a collective that another, done, never joins.
    calls = 1 if agree is not None else calls_per_sample(one_call_s, budget)
    if agree is not None:
        count = agree(planned_samples(one_call_s, budget, floor))
        budget = Budget(budget.warmup_iters, count, count, 0.0, float("inf"))
    timing.calls_per_sample = calls
    samples: list[float] = []
    before = cpu()
    begin = clock()
    while True:
        samples.append(time_block(fn, sync, clock, calls))
        elapsed = (clock() - begin) / 1e9
        enough = len(samples) >= budget.min_iters and elapsed >= budget.min_time_s
        out_of_time = elapsed >= budget.max_time_s and len(samples) >= min(floor, budget.max_iters)
        if enough or len(samples) >= budget.max_iters or out_of_time:
            break
    timing.timed_s = (clock() - begin) / 1e9
    timing.disturbance = disturbance(before, cpu(), timing.timed_s, threads)
    timing.samples_s = samples
    return timing


def memory_pass(
    fn: Callable[[], Any],
    sync: Callable[[], None],
    start: Callable[[], None],
    stop: Callable[[], None],
    calls: int = MEMORY_PASS_CALLS,
    mark: Callable[[], None] | None = None,
) -> None:
    """Steady-state calls under the memory tracker, apart from (after) the timed samples. With
    mark, one priming call first, then mark(): the tracker's figure begins there."""
    sync()
    start()
    try:
        if mark is not None:
            fn()
            sync()
            mark()
        for _ in range(calls):
            fn()
        sync()
    finally:
        stop()


def timer_overhead_s(clock: Clock = time.perf_counter_ns, repeats: int = 20000) -> float:
    """Median cost of one empty timed sample (two clock reads and two no-op syncs)."""
    from suite.core.stats import quantile

    def nothing() -> None:
        return None

    costs = sorted(time_call(nothing, nothing, clock) for _ in range(repeats))
    return quantile(costs, 0.5)
