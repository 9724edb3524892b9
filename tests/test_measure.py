"""The timing loop, driven by a fake clock: no wall-clock assertions."""

from __future__ import annotations

from suite.worker.measure import (
    FLOOR_SAMPLES,
    MEMORY_PASS_CALLS,
    Budget,
    memory_pass,
    planned_samples,
    run_timed,
)


class FakeClock:
    """Each call to fn advances time by the next step; clock reads are free."""

    def __init__(self, steps_ns: list[int]) -> None:
        self.now = 0
        self.steps = steps_ns
        self.calls = 0

    def __call__(self) -> int:
        return self.now

    def fn(self) -> None:
        self.now += self.steps[min(self.calls, len(self.steps) - 1)]
        self.calls += 1


def test_cold_start_and_warmup_are_kept_out_of_samples() -> None:
    clock = FakeClock([5_000_000_000, 1_000_000, 1_000_000, 2_000_000])
    budget = Budget(warmup_iters=2, min_iters=5, max_iters=10, min_time_s=0.0, max_time_s=100)
    syncs: list[int] = []
    timing = run_timed(clock.fn, lambda: syncs.append(1), budget, clock=clock, compiled=True)
    assert timing.cold_start_s == 5.0
    assert timing.compile_s == 5.0
    assert timing.warmup_iters == 2
    assert timing.samples_s == [0.002] * 5
    assert len(syncs) == 2 * (1 + 2 + 5)  # a sync before and after every call


def test_past_max_time_sampling_goes_on_to_the_floor() -> None:
    # A 1 s call is not timed 3 or 4 times: past max_time the loop still collects the floor.
    clock = FakeClock([1_000_000_000])
    budget = Budget(warmup_iters=0, min_iters=100, max_iters=1000, min_time_s=0, max_time_s=3.5)
    assert len(run_timed(clock.fn, lambda: None, budget, clock=clock).samples_s) == FLOOR_SAMPLES
    fewer = run_timed(clock.fn, lambda: None, budget, clock=clock, floor=2)
    assert len(fewer.samples_s) == 4  # the floor reached, max_time stops it


def test_sampling_stops_at_max_time_once_the_floor_is_in() -> None:
    clock = FakeClock([10_000_000])  # 10 ms
    budget = Budget(warmup_iters=0, min_iters=500, max_iters=1000, min_time_s=0, max_time_s=0.5)
    assert len(run_timed(clock.fn, lambda: None, budget, clock=clock).samples_s) == 50


def test_sampling_needs_both_minimums() -> None:
    clock = FakeClock([1_000_000])
    budget = Budget(warmup_iters=0, min_iters=3, max_iters=1000, min_time_s=0.010, max_time_s=10)
    timing = run_timed(clock.fn, lambda: None, budget, clock=clock)
    assert len(timing.samples_s) == 10


def test_memory_is_measured_in_its_own_pass_after_the_samples() -> None:
    clock = FakeClock([1_000])
    events: list[str] = []

    def fn() -> None:
        clock.fn()
        events.append("call")

    budget = Budget(warmup_iters=1, min_iters=2, max_iters=2, min_time_s=0, max_time_s=1)
    run_timed(fn, lambda: None, budget, clock=clock, floor=0)
    assert events == ["call"] * 4  # cold, warmup, two samples: no instrument among them
    memory_pass(fn, lambda: None, lambda: events.append("start"), lambda: events.append("end"))
    assert events[4:] == ["start", *["call"] * MEMORY_PASS_CALLS, "end"]


def test_fast_calls_are_timed_in_blocks() -> None:
    clock = FakeClock([1_000_000])  # 1 ms per call
    budget = Budget(
        warmup_iters=2, min_iters=4, max_iters=4, min_time_s=0, max_time_s=10, min_sample_s=0.005
    )
    syncs: list[int] = []
    timing = run_timed(clock.fn, lambda: syncs.append(1), budget, clock=clock)
    assert timing.calls_per_sample == 5
    assert timing.samples_s == [0.001] * 4  # per call, the mean of each block
    assert clock.calls == 1 + 2 + 4 * 5
    assert len(syncs) == 2 * (1 + 2 + 4)  # one sync pair per block, not per call


def test_slow_calls_are_timed_one_by_one() -> None:
    clock = FakeClock([10_000_000])
    budget = Budget(
        warmup_iters=1, min_iters=3, max_iters=3, min_time_s=0, max_time_s=10, min_sample_s=0.005
    )
    assert run_timed(clock.fn, lambda: None, budget, clock=clock).calls_per_sample == 1


def test_planned_samples_are_what_the_clock_would_have_stopped_at() -> None:
    # The ranks of a cell fix their samples before the first one; at a steady step time the
    # plan must equal the count the stopping rule reaches on its own clock.
    budgets = [
        Budget(warmup_iters=0, min_iters=200, max_iters=2000, min_time_s=0.2, max_time_s=0.6),
        Budget(warmup_iters=0, min_iters=100, max_iters=1000, min_time_s=0, max_time_s=3.5),
        Budget(warmup_iters=0, min_iters=3, max_iters=1000, min_time_s=0.010, max_time_s=10),
        Budget(warmup_iters=0, min_iters=50, max_iters=60, min_time_s=1.0, max_time_s=30),
    ]
    for budget in budgets:
        for step_ns in (1_000, 1_000_000, 3_000_000, 10_000_000, 50_000_000, 1_000_000_000):
            clock = FakeClock([step_ns])
            taken = len(run_timed(clock.fn, lambda: None, budget, clock=clock).samples_s)
            assert planned_samples(step_ns / 1e9, budget) == taken, (budget, step_ns)


def test_ranks_take_the_count_they_agree_on() -> None:
    clock = FakeClock([50_000_000])  # 50 ms: a checkpoint's save and load at smoke size
    budget = Budget(warmup_iters=2, min_iters=200, max_iters=2000, min_time_s=0.2, max_time_s=0.6)
    offered: list[int] = []

    def fewest(count: int) -> int:
        offered.append(count)
        return count - 5  # another rank planned fewer

    timing = run_timed(clock.fn, lambda: None, budget, clock=clock, agree=fewest)
    assert offered == [FLOOR_SAMPLES]  # 0.6 s fits 12 such samples: the floor, not 200
    assert len(timing.samples_s) == FLOOR_SAMPLES - 5


def test_ranks_time_one_call_a_sample() -> None:
    # Blocks of calls sized on each rank's clock would differ in calls between the ranks.
    clock = FakeClock([100_000])  # 0.1 ms, well under min_sample_s
    budget = Budget(warmup_iters=2, min_iters=200, max_iters=2000, min_time_s=0.2,
                    max_time_s=0.6, min_sample_s=0.002)  # fmt: skip
    alone = run_timed(clock.fn, lambda: None, budget, clock=clock)
    assert alone.calls_per_sample == 20
    ranked = run_timed(clock.fn, lambda: None, budget, clock=clock, agree=lambda n: n)
    assert ranked.calls_per_sample == 1
    assert len(ranked.samples_s) == 2000  # max_iters: 0.2 s would need 2000 0.1 ms samples
