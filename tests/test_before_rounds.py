"""What an A/B runs before its rounds: the two sides' counting at once, and the rollback checks
on the thread the side done first leaves (suite/flows/counts.py side_by_side)."""

from __future__ import annotations

import threading

import pytest

from suite.flows.counts import side_by_side

# A liveness bound, not a measurement: a task waits this long for what should come at once.
PATIENCE_S = 120.0


def test_then_runs_beside_the_slower_task_once_the_first_is_done() -> None:
    first_done, then_ran = threading.Event(), threading.Event()
    order: list[str] = []

    def quick() -> None:
        order.append("quick")
        first_done.set()

    def slow() -> None:
        # Holds until `then` has run: had `then` waited for every task, this would not end.
        assert then_ran.wait(PATIENCE_S), "then did not run beside the slower task"
        order.append("slow")

    def then() -> str:
        assert first_done.is_set()
        order.append("then")
        then_ran.set()
        return "checked"

    assert side_by_side([slow, quick], then) == "checked"
    assert order == ["quick", "then", "slow"]


def test_then_does_not_start_after_a_failed_task_and_the_error_is_raised() -> None:
    ran: list[str] = []

    def broken() -> None:
        raise RuntimeError("Valgrind died")

    def then() -> None:
        ran.append("then")

    with pytest.raises(RuntimeError, match="Valgrind died"):
        side_by_side([broken], then)
    assert ran == []


def test_a_task_that_fails_beside_then_is_raised_after_then_is_done() -> None:
    then_started, then_done = threading.Event(), threading.Event()

    def fails_later() -> None:
        assert then_started.wait(PATIENCE_S)
        raise RuntimeError("the candidate's count failed")

    def then() -> None:
        then_started.set()
        then_done.set()

    with pytest.raises(RuntimeError, match="candidate's count failed"):
        side_by_side([fails_later, lambda: None], then)
    assert then_done.is_set()


def test_without_then_the_tasks_run_and_nothing_is_returned() -> None:
    ran: list[int] = []
    assert side_by_side([lambda: ran.append(1), lambda: ran.append(2)], None) is None
    assert sorted(ran) == [1, 2]
