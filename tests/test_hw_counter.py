"""Counting with the CPU's own instruction counter (suite/worker/hw_counter.py) where a machine
has one, callgrind where not (suite/execute/counting.py counting_method). The same calls are
checked with a software event where the machine has no PMU, so the path is exercised here: open,
reset, enable, disable, read."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from suite.core.errors import InputError
from suite.core.spec import CellSpec
from suite.execute import counting
from suite.execute.environment import RunOptions, worker_env
from suite.worker import counting as worker_counting
from suite.worker import hw_counter
from suite.worker.counting import COUNT_WITH_VAR

SOFTWARE = (hw_counter.PERF_TYPE_SOFTWARE, hw_counter.PERF_COUNT_SW_TASK_CLOCK)
HERE, WHY = hw_counter.available()


def _busy(n: int) -> int:
    return sum(i * i for i in range(n))


def test_a_thread_counter_counts_between_start_and_stop_only() -> None:
    counter = hw_counter.ThreadInstructions(SOFTWARE)
    try:
        counter.start()
        _busy(200_000)
        small = counter.stop()
        _busy(2_000_000)  # outside the count
        counter.start()  # reset: the next count starts from nothing
        _busy(2_000_000)
        large = counter.stop()
    finally:
        counter.close()
    assert 0 < small < large


def test_the_hardware_counter_is_there_or_says_why() -> None:
    if HERE:
        counter = hw_counter.ThreadInstructions()
        counter.start()
        _busy(100_000)
        assert counter.stop() > 100_000
        counter.close()
    else:
        assert any(s in WHY for s in ("no hardware instruction counter", "not allowed", "failed"))
        with pytest.raises(hw_counter.CounterUnavailable, match=r"perf_event|counter"):
            hw_counter.ThreadInstructions()


def test_a_counting_worker_counts_its_steps_with_the_counter(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(COUNT_WITH_VAR, "perf")
    monkeypatch.setattr(hw_counter, "EVENT", SOFTWARE)
    counted = worker_counting.count_steps(lambda: _busy(300_000), lambda: None, 3)
    assert counted["method"] == "perf" and counted["steps"] == 3
    assert counted["total"] > 0 and counted["per_step"] == counted["total"] / 3
    # Without a counter the worker fails before any work, saying why.
    monkeypatch.setattr(hw_counter, "EVENT", (hw_counter.PERF_TYPE_HARDWARE, 1 << 40))
    with pytest.raises(hw_counter.CounterUnavailable):
        worker_counting.count_steps(lambda: pytest.fail("ran without a counter"), lambda: None, 1)


def test_the_method_is_the_counter_where_there_is_one_unless_asked() -> None:
    assert counting.counting_method({})[0] == ("perf" if HERE else "callgrind")
    if not HERE:
        assert WHY in counting.counting_method({})[1]
    assert counting.counting_method({COUNT_WITH_VAR: "callgrind"})[0] == "callgrind"
    assert counting.counting_method({COUNT_WITH_VAR: "perf"})[0] == "perf"
    with pytest.raises(InputError, match=COUNT_WITH_VAR):
        counting.counting_method({COUNT_WITH_VAR: "cachegrind"})
    assert counting.counting_setup("perf") != counting.counting_setup("callgrind")


@pytest.mark.slow
def test_a_side_counted_with_the_counter_runs_natively_and_fails_closed_without_one(
    tmp_path: Path,
) -> None:
    """A real fork server, no Valgrind: with a counter the cell's count is in the record; on a
    machine without one the record fails and says why (the gate is then untested, never pass)."""
    spec = CellSpec(
        workload="sdpa", ref="sdpa", params=(("mask", "none"), ("dtype", "fp32"),
        ("pass", "fwd")), backend="cpu", profile="smoke", lane="production",
    )  # fmt: skip
    env = worker_env(RunOptions(out=tmp_path))
    counter = counting.Counter(tmp_path, sys.executable, env, method="perf")
    try:
        doc = counter.count(spec, "run", 0)
    finally:
        counter.close()
    record = json.loads(counting.count_file(tmp_path, spec, 0).read_text())
    assert record["status"] == doc["status"]
    if HERE:
        assert doc["status"] == "ok"
        counted = doc["instructions"]
        assert counted["method"] == "perf" and counted["per_step"] > 0
        assert counted.get("profile") is None  # no per-function totals from the counter
    else:
        assert doc["status"] == "failed"
        assert WHY.split(" (")[0] in (doc["failure"] or {})["message"]
