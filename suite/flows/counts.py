"""The counting processes of an A/B's instructions gate: both sides count at once, before the
rounds, at the lowest priority (suite/execute/counting.py NICE), and whatever runs beside them
starts with them and takes the CPU it needs first."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import TypeVar

from suite.core.errors import InputError
from suite.core.results import read_result, record_wall_s
from suite.core.spec import CellSpec
from suite.execute.counting import Counter, count_file, countable
from suite.execute.progress import Progress
from suite.execute.runner import Run
from suite.execute.sides import PreparedSide
from suite.judge.instructions import REPLICATES

T = TypeVar("T")


def count_cells(
    cells: Sequence[CellSpec],
    runs: dict[str, Run],
    sides: dict[str, PreparedSide],
    progress: Progress | None,
    beside: Callable[[], T] | None = None,
) -> T | None:
    """The counting processes of the instructions gate, before the rounds, for every countable
    cell: REPLICATES per side. The two sides count at once, one thread each (a count runs on
    one thread, and instructions do not depend on what else runs). A record already counted
    (a resumed A/B) stays. `beside` runs at the same time, and what it returns is returned."""
    todo = [spec for spec in cells if countable(spec)]

    def count_side(role: str) -> None:
        run = runs[role]
        counter = Counter(
            run.dir,
            run.options.interpreter,
            run.worker_env,
            run.options.launcher,
            in_container=sides[role].kind == "docker",
        )
        try:
            for spec in todo:
                for replicate in range(REPLICATES):
                    if _counted(count_file(run.dir, spec, replicate), spec):
                        continue
                    if progress is not None:
                        progress.note(f"counting {spec.cell_id} [{role} c{replicate}]")
                    counter.count(spec, run.run_id, replicate)
        finally:
            counter.close()

    return side_by_side([partial(count_side, role) for role in runs], beside)


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
