"""What an A/B runs before its rounds: the two sides' counting at once, and the rollback checks
beside them from the start (suite/flows/counts.py side_by_side); the counting processes run at
the lowest priority (suite/execute/counting.py NICE)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import pytest

from suite.execute.counting import NICE
from suite.flows.counts import side_by_side

# A liveness bound, not a measurement: a task waits this long for what should come at once.
PATIENCE_S = 120.0


def test_beside_runs_with_the_tasks_from_the_start() -> None:
    beside_started, tasks_started = threading.Event(), threading.Barrier(3)
    order: list[str] = []

    def task() -> None:
        # Holds until `beside` has started: had it waited for a task to end, this would not end.
        tasks_started.wait(PATIENCE_S)
        assert beside_started.wait(PATIENCE_S), "beside did not start with the tasks"
        order.append("task")

    def beside() -> str:
        beside_started.set()
        tasks_started.wait(PATIENCE_S)
        order.append("beside")
        return "checked"

    assert side_by_side([task, task], beside) == "checked"
    assert sorted(order) == ["beside", "task", "task"]


def test_a_task_that_fails_is_raised_after_beside_is_done() -> None:
    beside_started, beside_done = threading.Event(), threading.Event()

    def fails_later() -> None:
        assert beside_started.wait(PATIENCE_S)
        raise RuntimeError("the candidate's count failed")

    def beside() -> None:
        beside_started.set()
        beside_done.set()

    with pytest.raises(RuntimeError, match="candidate's count failed"):
        side_by_side([fails_later, lambda: None], beside)
    assert beside_done.is_set()


def test_an_error_beside_the_tasks_is_raised() -> None:
    ran: list[int] = []

    def broken() -> None:
        raise RuntimeError("the rehearsal could not start")

    with pytest.raises(RuntimeError, match="rehearsal"):
        side_by_side([lambda: ran.append(1)], broken)
    assert ran == [1]


def test_without_beside_the_tasks_run_and_nothing_is_returned() -> None:
    ran: list[int] = []
    assert side_by_side([lambda: ran.append(1), lambda: ran.append(2)], None) is None
    assert sorted(ran) == [1, 2]


def test_a_counting_process_runs_at_the_lowest_priority() -> None:
    # The prefix the fork server and every counting container start under, run for real.
    code = "import os; print(os.nice(0))"
    out = subprocess.run([*NICE, sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert int(out.stdout) == max(19, os.nice(0))


def test_a_niced_process_in_a_session_of_its_own_keeps_its_priority() -> None:
    # Each counting worker is a session of its own (the fork server's setsid), which Linux
    # schedules as an autogroup of nice 0 unless the group is given the process's nice.
    if not os.path.exists("/proc/self/autogroup"):
        pytest.skip("this kernel has no autogroups: nice alone is the priority")
    code = (
        "import os; from suite.worker.counting import keep_priority; os.setsid(); "
        "before = open('/proc/self/autogroup').read().split()[-1]; keep_priority(); "
        "print(before, open('/proc/self/autogroup').read().split()[-1])"
    )
    out = subprocess.run([*NICE, sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["0", "19"]
