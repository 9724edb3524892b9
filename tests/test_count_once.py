"""Counting once a side, and again only where the verdict needs it (suite/flows/counts.py): the
cells whose first counts differ by more than one count settles get REPLICATES counts a side,
the others one; without a threshold every cell is counted REPLICATES times."""

from __future__ import annotations

import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from suite.core.errors import InputError
from suite.flows import counts
from suite.judge.instructions import ONE_COUNT_SHARE, REPLICATES

THRESHOLD = 0.02
# cell -> the candidate's instructions per step over the baseline's
CHANGES = {
    "same": 0.0,
    "small": THRESHOLD * ONE_COUNT_SHARE * 0.5,
    "near": THRESHOLD * ONE_COUNT_SHARE * 1.5,
    "slower": 0.05,
}


class FakeCounter:
    docs: dict[Path, dict[str, Any]] = {}
    counted: list[tuple[str, str, int]] = []
    threads: dict[str, set[str]] = {}

    def __init__(self, run_dir: Path, *_: Any, **__: Any) -> None:
        self.run_dir = run_dir
        self.thread = threading.current_thread().name

    def count(self, spec: Any, run_id: str, replicate: int) -> None:
        # A counter's fork server dies with the thread that started it: one thread a counter.
        assert threading.current_thread().name == self.thread
        role = self.run_dir.name
        level = 1e7 * (1 + (CHANGES[spec.cell_id] if role == "candidate" else 0.0))
        path = counts.count_file(self.run_dir, spec, replicate)
        self.docs[path] = {"status": "ok", "spec_hash": spec.spec_hash,
                           "instructions": {"per_step": level}}  # fmt: skip
        self.counted.append((role, spec.cell_id, replicate))
        self.threads.setdefault(role, set()).add(threading.current_thread().name)

    def close(self, compiled: bool = True) -> None:
        pass


def _read(path: Path) -> dict[str, Any]:
    if path not in FakeCounter.docs:
        raise InputError("no such record", file=str(path))
    return FakeCounter.docs[path]


@pytest.mark.parametrize("threshold", [THRESHOLD, None])
def test_a_cell_is_counted_again_only_where_one_count_cannot_settle_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, threshold: float | None
) -> None:
    FakeCounter.docs, FakeCounter.counted, FakeCounter.threads = {}, [], {}
    monkeypatch.setattr(counts, "Counter", FakeCounter)
    monkeypatch.setattr(counts, "read_result", _read)
    monkeypatch.setattr(counts, "countable", lambda spec: True)
    cells = [SimpleNamespace(cell_id=name, spec_hash=name) for name in CHANGES]
    runs = {
        role: SimpleNamespace(dir=tmp_path / role, run_id="r", worker_env={},
                              options=SimpleNamespace(interpreter="python", launcher=None))
        for role in ("baseline", "candidate")
    }  # fmt: skip
    sides = {role: SimpleNamespace(kind="requirement") for role in runs}
    beside = counts.count_cells(cells, runs, sides, None, lambda: "beside ran", threshold)  # type: ignore[arg-type]
    assert beside == "beside ran"
    by_cell: dict[str, set[tuple[str, int]]] = {}
    for role, cell, replicate in FakeCounter.counted:
        by_cell.setdefault(cell, set()).add((role, replicate))
    both = {(role, r) for role in runs for r in range(REPLICATES)}
    once = {(role, 0) for role in runs}
    if threshold is None:
        assert by_cell == dict.fromkeys(CHANGES, both)
    else:
        assert by_cell == {"same": once, "small": once, "near": both, "slower": both}
    assert len(FakeCounter.counted) == sum(len(v) for v in by_cell.values())  # none twice


@pytest.mark.parametrize(("cells", "lanes"), [(6, 2), (counts.STEAL_AT - 1, 1)])
def test_a_lane_done_with_its_own_side_helps_the_other(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cells: int, lanes: int
) -> None:
    """The baseline's counts are all there already (kept from an earlier run): its lane starts
    a second counting server of the candidate and takes from the end of the candidate's queue,
    where enough is left to pay for that server's start; each count is made once."""
    import time

    made: list[dict[str, Any]] = []

    class Slow(FakeCounter):
        def __init__(self, run_dir: Path, *args: Any, **kwargs: Any) -> None:
            super().__init__(run_dir, *args, **kwargs)
            made.append({"role": run_dir.name, "lane": kwargs.get("lane", 0)})

        def count(self, spec: Any, run_id: str, replicate: int) -> None:
            time.sleep(0.5)  # a count takes a while: the other lane finds the queue still long
            super().count(spec, run_id, replicate)

    FakeCounter.docs, FakeCounter.counted, FakeCounter.threads = {}, [], {}
    monkeypatch.setattr(counts, "Counter", Slow)
    monkeypatch.setattr(counts, "read_result", _read)
    monkeypatch.setattr(counts, "countable", lambda spec: True)
    specs = [SimpleNamespace(cell_id=f"x{n}", spec_hash=f"x{n}") for n in range(cells)]
    for spec in specs:
        monkeypatch.setitem(CHANGES, spec.cell_id, 0.0)
    runs = {
        role: SimpleNamespace(dir=tmp_path / role, run_id="r", worker_env={},
                              options=SimpleNamespace(interpreter="python", launcher=None))
        for role in ("baseline", "candidate")
    }  # fmt: skip
    for spec in specs:
        path = counts.count_file(runs["baseline"].dir, spec, 0)  # type: ignore[arg-type]
        FakeCounter.docs[path] = {"status": "ok", "spec_hash": spec.spec_hash,
                                  "instructions": {"per_step": 1e7}}  # fmt: skip
    sides = {role: SimpleNamespace(kind="requirement") for role in runs}
    counts.count_cells(specs, runs, sides, None, None, THRESHOLD)  # type: ignore[arg-type]
    assert [c[0] for c in FakeCounter.counted] == ["candidate"] * cells  # each once
    assert len(FakeCounter.threads["candidate"]) == lanes
    assert sorted(m["lane"] for m in made if m["role"] == "candidate") == list(range(lanes))
