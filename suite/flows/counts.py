"""The counting processes of an A/B's instructions gate: both sides count at once, before the
rounds, at the lowest priority (suite/execute/counting.py NICE), and whatever runs beside them
starts with them and takes the CPU it needs first."""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import TypeVar

from suite.core.errors import InputError
from suite.core.results import read_result, record_wall_s
from suite.core.spec import CellSpec
from suite.execute.counting import Counter, count_file, countable, counting_setup
from suite.execute.kept_counts import KeptCounts, kept_counts
from suite.execute.progress import Progress
from suite.execute.runner import Run
from suite.execute.sides import PreparedSide
from suite.judge.instructions import REPLICATES, settled_by_one_count

T = TypeVar("T")


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
    where no threshold is given). The two sides count at once, one thread each (a count runs on
    one thread, and instructions do not depend on what else runs). A record already counted (a
    resumed A/B) stays, and so does a count kept from an earlier run of the same cell on the same
    build (suite/execute/kept_counts.py), where `keep` is on. `beside` runs at the same time,
    and what it returns is returned."""
    todo = [spec for spec in cells if countable(spec)]
    kept = _kept(runs, sides, progress) if todo and keep else {}
    counters = {
        role: Counter(
            run.dir,
            run.options.interpreter,
            run.worker_env,
            run.options.launcher,
            in_container=sides[role].kind == "docker",
            kept=kept.get(role),
        )
        for role, run in runs.items()
    }

    def count(role: str, specs: Sequence[CellSpec], replicates: range) -> None:
        run = runs[role]
        for spec in specs:
            for replicate in replicates:
                if _counted(count_file(run.dir, spec, replicate), spec):
                    continue
                if progress is not None:
                    progress.note(f"counting {spec.cell_id} [{role} c{replicate}]")
                counters[role].count(spec, run.run_id, replicate)

    # Both passes of a side run on one thread: a side's counting fork server dies with the
    # thread that started it (the death signal a worker's parent sets is the thread's).
    first_done = threading.Barrier(len(runs))

    def count_side(role: str) -> None:
        try:
            count(role, todo, range(1))
        except BaseException:
            first_done.abort()  # the other side stops waiting; this error is raised
            raise
        try:
            first_done.wait()
        except threading.BrokenBarrierError:
            return  # the other side failed: its error is the one raised
        again = [spec for spec in todo if not _settled(spec, runs, threshold)]
        count(role, again, range(1, REPLICATES))

    try:
        return side_by_side([partial(count_side, role) for role in runs], beside)
    finally:
        for counter in counters.values():
            counter.close()


def _kept(
    runs: dict[str, Run], sides: dict[str, PreparedSide], progress: Progress | None
) -> dict[str, KeptCounts]:
    setup = counting_setup()
    out = {}
    for role, run in runs.items():
        side = sides[role]
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
