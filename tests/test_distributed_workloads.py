"""The distributed workloads (collectives, fsdp2, checkpoint) on 2 CPU ranks over gloo, run
through the CLI; plus the torchcomms detection and the lockstep agreement without torch."""

from __future__ import annotations

import math
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from suite.core.results import read_result
from suite.workloads import Skip
from suite.workloads.collectives import (
    OPS,
    TORCHCOMMS_API,
    agree_on_calls,
    bus_factor,
    load_torchcomms,
)
from tests.helpers import cli

pytestmark = pytest.mark.slow

MATRIX = """\
version: 1
backends: [cpu]
workloads:
  - workload: 'suite.workloads.collectives:Collectives'
    grid: {size: [1KiB], api: [c10d]}
  - workload: 'suite.workloads.collectives:Collectives'
    grid: {op: [all_reduce], size: [1KiB], api: [torchcomms]}
  - workload: 'suite.workloads.fsdp2:Fsdp2'
  - workload: 'suite.workloads.checkpoint:Checkpoint'
    grid: {drop_optimizer_state: [false, true]}
"""


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist_workloads") / "run"
    matrix = out.parent / "m.yaml"
    matrix.write_text(MATRIX)
    cli("run", "--matrix", str(matrix), "--out", str(out), "--python", sys.executable)
    return out


def cell(run_dir: Path, cell_id: str) -> dict[str, Any]:
    return read_result(run_dir / "cells" / f"{cell_id}@cpu.json")


def metric(doc: dict[str, Any], name: str) -> Any:
    return doc["metrics"][name]["value"]


@pytest.mark.parametrize("op", OPS)
def test_collective_ok_or_unsupported(run_dir: Path, op: str) -> None:
    doc = cell(run_dir, f"collectives.{op}.1KiB.c10d.n1x2")
    if doc["status"] == "unsupported":  # gloo lacks some ops in some torch versions
        assert doc["failure"]["mode"] == "unsupported" and doc["failure"]["message"]
        return
    assert doc["status"] == "ok", doc.get("failure")
    assert [r["rank"] for r in doc["ranks"]] == [0, 1]
    assert all(r["metrics"]["p50_s"]["value"] > 0 for r in doc["ranks"])
    algbw, busbw = metric(doc, "algbw_GBps"), metric(doc, "busbw_GBps")
    assert algbw > 0 and busbw == pytest.approx(algbw * bus_factor(op, 2))
    assert algbw == pytest.approx(1024 / metric(doc, "p50_s") / 1e9)
    # The throughput gate judges bus bandwidth at the worst rank's step.
    assert doc["throughput"]["unit"] == "bus bytes/s"
    assert doc["throughput"]["items_per_iter"] == pytest.approx(1024 * bus_factor(op, 2))
    over = doc["timing"]["over_ranks"]
    assert over["ranks"] == 2 and doc["timing"]["summary"]["p50"] >= over["rank0_p50_s"]
    checks = doc["correctness"]["checks"]
    assert doc["correctness"]["passed"] and [c["label"] for c in checks] == [
        f"{op}[rank0]",
        f"{op}[rank1]",
    ]
    assert checks[0]["reference"] == "closed form"


def test_torchcomms_cell_skipped_with_reason(run_dir: Path) -> None:
    doc = cell(run_dir, "collectives.all_reduce.1KiB.torchcomms.n1x2")
    assert doc["status"] == "skipped"
    assert doc["failure"]["mode"] == "dependency"
    assert "torchcomms" in doc["failure"]["message"]


def test_fsdp2_matches_single_process(run_dir: Path) -> None:
    doc = cell(run_dir, "fsdp2.true.d256.n1x2")
    assert doc["status"] == "ok", doc.get("failure")
    correctness = doc["correctness"]
    assert correctness["passed"] and correctness["reference"] == "single-process training"
    assert math.isfinite(metric(doc, "loss_after_n_steps"))
    assert metric(doc, "comm_wait_s_per_step") > 0
    assert 0 < metric(doc, "comm_share") <= 1
    assert [r["rank"] for r in doc["ranks"]] == [0, 1]
    assert all(r["metrics"]["comm_wait_s_per_step"]["value"] > 0 for r in doc["ranks"])
    assert all(r["peak_bytes"] is not None for r in doc["ranks"])
    peaks = doc["memory"]["over_ranks"]["rank_peak_bytes"]
    assert doc["memory"]["peak_bytes"] == max(peaks) == max(r["peak_bytes"] for r in doc["ranks"])


def test_checkpoint_resume_is_exact(run_dir: Path) -> None:
    doc = cell(run_dir, "checkpoint.false.d256.n1x2")
    assert doc["status"] == "ok", doc.get("failure")
    assert metric(doc, "resume_equivalent") is True
    assert metric(doc, "resume_max_abs_diff") <= 1e-6
    assert metric(doc, "save_s") > 0 and metric(doc, "load_s") > 0
    assert doc["throughput"]["unit"] == "bytes/s"


def test_checkpoint_without_optimizer_state_fails(run_dir: Path) -> None:
    doc = cell(run_dir, "checkpoint.true.d256.n1x2")
    assert doc["status"] == "failed"
    assert doc["failure"]["mode"] == "correctness"
    assert metric(doc, "resume_equivalent") is False
    assert metric(doc, "resume_max_abs_diff") > 1e-5


# torchcomms detection, with fake packages on sys.path.


def _fake_torchcomms(root: Path, body: str, monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib

    (root / "torchcomms").mkdir()
    (root / "torchcomms" / "__init__.py").write_text(body)
    monkeypatch.syspath_prepend(str(root))
    monkeypatch.delitem(sys.modules, "torchcomms", raising=False)
    importlib.invalidate_caches()


def test_torchcomms_pypi_name_only_release_is_skipped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # What the PyPI package 'torchcomms' 0.0.1 does on import.
    body = 'raise ImportError("torchcomms can\'t be installed via PyPi -- see README for more details")\n'
    _fake_torchcomms(tmp_path, body, monkeypatch)
    with pytest.raises(Skip, match="name-only release: torchcomms can't be installed via PyPi"):
        load_torchcomms()


def test_torchcomms_without_api_is_skipped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_torchcomms(tmp_path, "VERSION = '0'\n", monkeypatch)
    with pytest.raises(Skip, match="name-only release: it has no " + ", ".join(TORCHCOMMS_API)):
        load_torchcomms()


def test_torchcomms_with_api_loads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_torchcomms(
        tmp_path, "def new_comm(*a, **k): pass\nclass ReduceOp: SUM = 0\n", monkeypatch
    )
    assert load_torchcomms().ReduceOp.SUM == 0


# agree_on_calls, with threads as ranks and a fake collective.


class FakeStore:
    def __init__(self) -> None:
        self.data: dict[str, str] = {}
        self.lock = threading.Lock()

    def set(self, key: str, value: str) -> None:
        with self.lock:
            self.data[key] = value

    def get(self, key: str) -> bytes:
        with self.lock:
            return self.data[key].encode()

    def check(self, keys: list[str]) -> bool:
        with self.lock:
            return all(k in self.data for k in keys)


class Collective:
    """Call number j returns once every rank has made call number j (or fails after 10 s)."""

    def __init__(self, world: int) -> None:
        self.world = world
        self.entered: dict[int, int] = defaultdict(int)
        self.cond = threading.Condition()

    def __call__(self, index: int) -> None:
        with self.cond:
            self.entered[index] += 1
            self.cond.notify_all()
            if not self.cond.wait_for(lambda: self.entered[index] >= self.world, timeout=10):
                raise TimeoutError(f"call {index} never completed")


def _simulate(
    stops: list[int],
    delays: list[float],
    patience: float,
    store: FakeStore | None = None,
    hold: dict[int, threading.Event] | None = None,
) -> list[int]:
    """Each rank makes stops[rank] timed calls, waits delays[rank] (or, for a rank in hold, for
    its event), then agrees."""
    world, collective = len(stops), Collective(len(stops))
    store = store or FakeStore()
    results: dict[int, int] = {}
    errors: list[BaseException] = []

    def rank_main(rank: int) -> None:
        count = 0

        def call() -> None:
            nonlocal count
            count += 1
            collective(count)

        try:
            for _ in range(stops[rank]):
                call()
            if hold and rank in hold:
                assert hold[rank].wait(20), f"rank {rank} was never released"
            else:
                time.sleep(delays[rank])
            results[rank] = agree_on_calls(store, rank, world, count, call, patience, timeout_s=20)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=rank_main, args=(r,)) for r in range(world)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors, errors
    return [results[r] for r in range(world)]


def test_lockstep_agrees_when_counts_already_match() -> None:
    assert _simulate([5, 5], [0.0, 0.0], patience=5.0) == [5, 5]


def test_lockstep_releases_a_rank_blocked_one_call_ahead() -> None:
    # Rank 2 decided on a 6th sample that ranks 0 and 1 never start: it blocks in call 6.
    assert _simulate([5, 5, 6], [0.0, 0.0, 0.0], patience=0.2) == [6, 6, 6]


class WatchedStore(FakeStore):
    """A store that sets an event when a key first takes a value: an order, not a delay."""

    def __init__(self, key: str, value: str) -> None:
        super().__init__()
        self.watched, self.seen = (key, value), threading.Event()

    def set(self, key: str, value: str) -> None:
        super().set(key, value)
        if (key, value) == self.watched:
            self.seen.set()


def test_lockstep_survives_a_slow_rank_taken_for_blocked() -> None:
    # Rank 1 is merely slow to post: it posts only after rank 0 has given up waiting, guessed it
    # blocked and stepped once more (posted 6); rank 1 then follows. No race against a clock.
    store = WatchedStore("torch-matrix/lockstep/count/0", "6")
    assert _simulate([5, 5], [0.0, 0.0], 0.1, store, hold={1: store.seen}) == [6, 6]
