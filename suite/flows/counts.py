"""The counting processes of an A/B's instructions gate: both sides count at once, before the
rounds, at the lowest priority (suite/execute/counting.py NICE), one lane a side that helps the
other side once its own is done, and whatever runs beside them starts with them and takes the
CPU it needs first."""

from __future__ import annotations

import math
import shutil
import threading
from collections import deque
from collections.abc import Callable, Collection, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import TypeVar

from suite.core.errors import InputError
from suite.core.results import COUNTS_DIR, read_result, record_wall_s
from suite.core.spec import CellSpec
from suite.execute.counting import (
    Counter,
    count_file,
    countable,
    counting_method,
    counting_setup,
)
from suite.execute.kept_counts import KeptCounts, kept_counts
from suite.execute.prepared import PreparedSide
from suite.execute.progress import Progress
from suite.execute.runner import Run
from suite.judge.instructions import REPLICATES, settled_by_one_count

T = TypeVar("T")


# A lane whose own side has nothing left to count starts a counting server of the other side and
# takes counts from the end of that side's queue, when at least this many are left there: the
# server's start under Valgrind (30-80 s here) is worth it only against several counts (10-60 s
# each). Once started, it takes whatever is left.
STEAL_AT = 4

Task = tuple[str, CellSpec, int]  # side, cell, replicate


class Queues:
    """What is left to count, a queue a side, taken from by the lanes under one lock."""

    def __init__(self, roles: Sequence[str]) -> None:
        self.lock = threading.Lock()
        self.left: dict[str, deque[tuple[CellSpec, int]]] = {role: deque() for role in roles}

    def add(self, role: str, spec: CellSpec, replicate: int) -> None:
        with self.lock:
            self.left[role].append((spec, replicate))

    def take(self, home: str, started: Collection[str]) -> Task | None:
        """The next count for a lane whose own side is `home` and which has counting servers
        of the sides in `started`: its own side's first, else another side's last."""
        with self.lock:
            if self.left[home]:
                return (home, *self.left[home].popleft())
            others = sorted((r for r in self.left if r != home), key=lambda r: -len(self.left[r]))
            for role in others:
                left = self.left[role]
                if len(left) >= STEAL_AT or (left and role in started):
                    return (role, *left.pop())
            return None


def count_cells(
    cells: Sequence[CellSpec],
    runs: dict[str, Run],
    sides: dict[str, PreparedSide],
    progress: Progress | None,
    beside: Callable[[], T] | None = None,
    threshold: float | None = None,
    keep: bool = False,
) -> T | None:
    """The counting processes of the instructions gate, before the rounds, for every countable
    cell: one a side first, then REPLICATES a side for each cell whose first counts differ by
    more than one count can settle (suite/judge/instructions.py settled_by_one_count; every cell,
    where no threshold is given). A record already counted (a resumed A/B) stays, and so does a
    count kept from an earlier run of the same cell on the same build (suite/execute/
    kept_counts.py), where `keep` is on. The rest is counted on one lane a side (a count runs on
    one thread, and instructions do not depend on what else runs); a lane done with its own side
    helps the other (STEAL_AT), so that both cores count to the end when one side had its counts
    kept. `beside` runs at the same time, and what it returns is returned."""
    todo = [spec for spec in cells if countable(spec)]
    method, why = counting_method() if todo else ("callgrind", "")
    if todo and progress is not None:
        progress.note(f"counting with {why}")
    if method == "perf":
        threshold = None  # a count costs what a plain run does: every cell REPLICATES a side
    kept = _kept(runs, sides, progress, method) if todo and keep else {}
    queues = Queues(list(runs))

    queue = partial(_queue, queues, runs, kept, progress)

    def second_pass() -> None:
        queue([spec for spec in todo if not _settled(spec, runs, threshold)], range(1, REPLICATES))

    queue(todo, range(1))
    # Each lane counts both passes on its own thread, which its counting servers die with (the
    # death signal a worker's parent sets is the thread's).
    first_done = threading.Barrier(len(runs), action=second_pass)

    try:
        lanes = [
            partial(_lane, n, role, queues, runs, sides, kept, method, progress, first_done)
            for n, role in enumerate(runs)
        ]
        return side_by_side(lanes, beside)
    finally:
        for run in runs.values():
            shutil.rmtree(run.dir / COUNTS_DIR / ".inductor-cache", ignore_errors=True)


def _lane(
    number: int,
    home: str,
    queues: Queues,
    runs: dict[str, Run],
    sides: dict[str, PreparedSide],
    kept: dict[str, KeptCounts],
    method: str,
    progress: Progress | None,
    first_done: threading.Barrier,
) -> None:
    """One lane: its own side's counts first, then the other side's where STEAL_AT allows; the
    first pass, the barrier (whose action queues the second), the second pass."""
    counters: dict[str, Counter] = {}

    def counter(role: str) -> Counter:
        if role not in counters:
            # A second server of another side has its own files (lane).
            lane_no = 0 if role == home else number + 1
            counters[role] = _counter(runs[role], sides[role], kept.get(role), lane_no, method)
        return counters[role]

    try:
        for last in (False, True):
            while (task := queues.take(home, counters)) is not None:
                role, spec, replicate = task
                if progress is not None:
                    extra = "" if role == home else ", a second server"
                    progress.note(f"counting {spec.cell_id} [{role} c{replicate}{extra}]")
                counter(role).count(spec, runs[role].run_id, replicate)
            if last:
                break
            try:
                first_done.wait()
            except threading.BrokenBarrierError:
                return  # another lane failed: its error is the one raised
    except BaseException:
        first_done.abort()  # the other lanes stop waiting; this error is raised
        raise
    finally:
        for started in counters.values():
            started.close(compiled=False)


def _queue(
    queues: Queues,
    runs: dict[str, Run],
    kept: dict[str, KeptCounts],
    progress: Progress | None,
    specs: Sequence[CellSpec],
    replicates: range,
) -> None:
    """Queue each count not yet in the run, nor kept from an earlier run (then copied in)."""
    for role, run in runs.items():
        for spec in specs:
            for replicate in replicates:
                path = count_file(run.dir, spec, replicate)
                if _counted(path, spec):
                    continue
                if role in kept and kept[role].reuse(spec, replicate, path, run.run_id):
                    if progress is not None:
                        progress.note(f"kept count of {spec.cell_id} [{role} c{replicate}]")
                    continue
                queues.add(role, spec, replicate)


def _counter(
    run: Run, side: PreparedSide, kept: KeptCounts | None, lane: int, method: str
) -> Counter:
    return Counter(
        run.dir, run.options.interpreter, run.worker_env, run.options.launcher,
        in_container=side.kind == "docker", kept=kept, lane=lane, method=method,
    )  # fmt: skip


def _kept(
    runs: dict[str, Run], sides: dict[str, PreparedSide], progress: Progress | None, method: str
) -> dict[str, KeptCounts]:
    out = {}
    for role, run in runs.items():
        side = sides[role]
        setup = counting_setup("callgrind" if side.kind == "docker" else method)
        out[role] = kept_counts(
            run.options.interpreter,
            run.worker_env,
            setup,
            image_digest=(side.image or {}).get("digest"),
            in_container=side.kind == "docker",
        )
        if out[role].side_key is None and progress is not None:
            progress.note(f"{role}: counts are not kept across runs: {out[role].why}")
    return out


def _settled(spec: CellSpec, runs: dict[str, Run], threshold: float | None) -> bool:
    """Whether one count a side settles the cell: both counted, within what one count decides."""
    if threshold is None:
        return False
    values = []
    for run in runs.values():
        try:
            doc = read_result(count_file(run.dir, spec, 0))
        except (InputError, OSError):
            return False
        per_step = (doc.get("instructions") or {}).get("per_step")
        if doc.get("status") != "ok" or not per_step:
            return True  # nothing a second count would settle: the gate says why
        values.append(float(per_step))
    base, cand = values[0], values[-1]
    return settled_by_one_count(cand / base - 1.0, threshold)


def side_by_side(tasks: Sequence[Callable[[], None]], beside: Callable[[], T] | None) -> T | None:
    """The tasks and `beside` at once; what `beside` returns is returned, and every error is
    raised once all of them are done (a task's first)."""
    with ThreadPoolExecutor(max_workers=len(tasks) + 1) as pool:
        started = [pool.submit(task) for task in tasks]
        after = pool.submit(beside) if beside is not None else None
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
