"""Distributed cells on several nodes: two "hosts" as network namespaces on a bridge, each with
its own address, host name and private run folder, one torchrun agent each, one rendezvous
per cell; what comes back, and what a killed agent or a pulled cable leaves."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from suite.core.results import read_result
from tests.helpers import REPO, TESTS, THREADS_ENV
from tests.netns import Hosts, can_make_namespaces, hosts_for

pytestmark = [
    pytest.mark.slow,
    pytest.mark.heavy,  # four ranks and two agents at once
    pytest.mark.skipif(can_make_namespaces() is not None, reason=str(can_make_namespaces())),
]
DIST = TESTS / "plugins" / "dist_planted.py"


@pytest.fixture(scope="module")
def hosts(worker_id: str) -> Iterator[Hosts]:
    made = hosts_for(worker_id).create()
    try:
        yield made
    finally:
        made.remove()


def run(out: Path, matrix: str, *extra: str, env: dict[str, str] | None = None) -> int:
    """`torch-matrix run` of MATRIX in a process of its own (a test kills what it starts)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    file = out.parent / f"{out.name}.yaml"
    file.write_text(matrix)
    done = subprocess.run(
        [sys.executable, "-m", "suite", "run", "--matrix", str(file), "--out", str(out), *extra],
        cwd=REPO, env={**os.environ, **THREADS_ENV, **(env or {})}, capture_output=True,
        text=True, timeout=900,
    )  # fmt: skip
    return done.returncode


def only_cell(out: Path) -> dict[str, Any]:
    (path,) = (out / "cells").glob("*.json")
    return dict(read_result(path))


WORLD4 = """\
version: 1
backends: [cpu]
workloads:
  - workload: fsdp2
    world: {nodes: [2], ranks_per_node: [2]}
  - workload: checkpoint
    grid: {drop_optimizer_state: [false]}
    world: {nodes: [2], ranks_per_node: [2]}
  - workload: collectives
    grid: {op: [all_reduce, all_gather], size: [1KiB], api: [c10d]}
    world: {nodes: [2], ranks_per_node: [2]}
"""
RESHARD4 = """\
  - workload: reshard
    grid: {bug: [none, drop_shard]}
    world: {nodes: [2], ranks_per_node: [2]}
"""


def test_two_nodes_of_two_ranks_run_every_distributed_workload(
    hosts: Hosts, tmp_path: Path
) -> None:
    out = tmp_path / "world4"
    run(out, WORLD4 + RESHARD4 + hosts.launcher_yaml())
    cells = {p.stem: dict(read_result(p)) for p in (out / "cells").glob("*.json")}
    assert sorted(cells) == [
        "checkpoint.false.d256.n2x2@cpu",
        "collectives.all_gather.1KiB.c10d.n2x2@cpu",
        "collectives.all_reduce.1KiB.c10d.n2x2@cpu",
        "fsdp2.true.d256.n2x2@cpu",
        "reshard.drop_shard.d256.n2x2@cpu",
        "reshard.none.d256.n2x2@cpu",
    ]
    # Resharded across the nodes, each save handed to the other node (nothing is shared): a
    # lost shard fails every load after it, the clean path passes them all.
    planted = cells.pop("reshard.drop_shard.d256.n2x2@cpu")
    assert planted["status"] == "failed", planted["failure"]
    assert {c["label"]: c["passed"] for c in planted["correctness"]["checks"]} == {
        "reshard_2_to_4": False, "reshard_4_to_2": False, "reshard_4_to_1": False,
    }  # fmt: skip
    for cell_id, doc in cells.items():
        assert doc["status"] == "ok", (cell_id, doc["failure"])
        assert doc["correctness"]["passed"], cell_id
        assert doc["spec"]["world"] == {"nodes": 2, "ranks_per_node": 2}
        where = [
            (r["rank"], r["node"], r["local_rank"], r["host"], r["address"]) for r in doc["ranks"]
        ]
        by_node = {r[1]: (r[3], r[4]) for r in where}
        assert by_node == {i: (hosts.names[i], hosts.address(i)) for i in (0, 1)}, where
        assert sorted(r[0] for r in where) == [0, 1, 2, 3]
        assert sorted((r[1], r[2]) for r in where) == [(0, 0), (0, 1), (1, 0), (1, 1)]
        placement = doc["placement"]
        assert placement["launcher"] == "local"
        assert placement["rendezvous"] == f"{hosts.address(0)}:29500"
        assert cell_id.rsplit("@", 1)[0] in placement["rdzv_id"]
    assert (
        cells["fsdp2.true.d256.n2x2@cpu"]["correctness"]["reference"] == "single-process training"
    )
    assert cells["fsdp2.true.d256.n2x2@cpu"]["metrics"]["world_size"]["value"] == 4
    assert cells["checkpoint.false.d256.n2x2@cpu"]["metrics"]["resume_equivalent"]["value"]
    # Each node wrote into a private tmpfs over the run folder: nothing of theirs is here.
    assert not (out / "tensors").exists()
    assert not list((out / "cells").glob(".*"))


def _agent_of(hosts: Hosts, node: int) -> int:
    for pid in hosts.pids(node):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"torch.distributed.run" in cmdline:
            parent = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
            if parent not in hosts.pids(node):  # the agent, not one of its ranks
                return pid
    raise AssertionError(f"no torchrun agent in {hosts.names[node]}")


def _start_hold(hosts: Hosts, out: Path, timeout: int) -> subprocess.Popen[str]:
    file = out.parent / f"{out.name}.yaml"
    file.write_text(
        f"version: 1\nbackends: [cpu]\nworkloads:\n  - workload: '{DIST}:Hold'\n"
        "    grid: {seconds: [300]}\n    world: {nodes: [2]}\n" + hosts.launcher_yaml()
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "suite", "run", "--matrix", str(file), "--out", str(out),
         "--timeout", str(timeout)],
        cwd=REPO, env={**os.environ, **THREADS_ENV}, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        logs = list((out / "logs").glob("*.node1.log"))
        if logs and "holding on rank" in logs[0].read_text(errors="replace"):
            return proc
        time.sleep(0.5)
    proc.kill()
    raise AssertionError("the cell's ranks never started holding")


def test_a_killed_agent_crashes_the_cell_naming_its_node(hosts: Hosts, tmp_path: Path) -> None:
    out = tmp_path / "killed"
    proc = _start_hold(hosts, out, timeout=300)
    os.kill(_agent_of(hosts, 1), signal.SIGKILL)
    assert proc.wait(timeout=240) == 1
    doc = only_cell(out)
    assert doc["status"] == "crashed", doc["failure"]
    assert doc["failure"]["mode"] == "signal"
    assert doc["failure"]["message"].startswith(
        f"node 1 ({hosts.address(1)}): its agent was killed by SIGKILL"
    )
    assert [n["signal"] for n in doc["placement"]["nodes"]] == [None, "SIGKILL"]


def test_a_pulled_cable_times_out_naming_the_silent_node(hosts: Hosts, tmp_path: Path) -> None:
    out = tmp_path / "cable"
    proc = _start_hold(hosts, out, timeout=90)
    hosts.link(1, up=False)
    try:
        assert proc.wait(timeout=240) == 1
    finally:
        hosts.link(1, up=True)
    doc = only_cell(out)
    assert doc["status"] == "timeout", doc["failure"]
    message = doc["failure"]["message"]
    assert f"node 1 ({hosts.address(1)}) stopped answering" in message
    assert f"node 0 ({hosts.address(0)}) stopped" not in message


def test_diverging_cell_orders_never_join_one_rendezvous(tmp_path: Path) -> None:
    """Two nodes each at a different cell, at one endpoint: the rendezvous ids differ, so
    neither trains with the other; the hosting node gives up at the join timeout and the
    other loses the store it waited on."""
    from suite.core.spec import CellSpec
    from suite.core.wire import RECORD_MARK
    from suite.execute.environment import RunOptions, worker_env
    from suite.execute.multinode import agent_argv, rendezvous_id, run_agents
    from suite.execute.nodes import LocalLauncher

    port = LocalLauncher({"kind": "local"}, {}).port()
    options = RunOptions(out=tmp_path)
    env = worker_env(options)
    commands = []
    for node, op in enumerate(("all_reduce", "broadcast")):
        spec = CellSpec("collectives", "collectives", (("op", op), ("size", "1KiB"),
                        ("api", "c10d")), "cpu", "smoke", ranks=1, nodes=2, distributed=True)  # fmt: skip
        rdzv = rendezvous_id("R", spec.cell_id)
        argv = agent_argv(spec, options, tmp_path / f"{op}.json", "R", 0,
                          f"127.0.0.1:{port}", rdzv, node, "127.0.0.1", 15)  # fmt: skip
        commands.append((argv, {**env, **THREADS_ENV}))
    logs = [tmp_path / "node0.log", tmp_path / "node1.log"]
    exits = run_agents(commands, logs, timeout_s=120)
    assert [e.timed_out for e in exits] == [False, False]
    assert all(e.returncode not in (0, None) for e in exits)
    for log in logs:
        text = log.read_text(errors="replace")
        assert RECORD_MARK not in text
        assert re.search(r"Rendezvous(Timeout|Connection)Error", text), text[-2000:]


def test_the_ssh_launcher_runs_the_same_cells_through_a_real_sshd(
    hosts: Hosts, tmp_path: Path
) -> None:
    from tests.netns import start_sshd

    sshd = start_sshd(hosts, tmp_path / "ssh")
    try:
        out = tmp_path / "over-ssh"
        run(out, WORLD4 + sshd.launcher_yaml())
    finally:
        sshd.stop()
    cells = {p.stem: dict(read_result(p)) for p in (out / "cells").glob("*.json")}
    assert len(cells) == 4
    for cell_id, doc in cells.items():
        assert doc["status"] == "ok", (cell_id, doc["failure"])
        assert doc["correctness"]["passed"], cell_id
        assert doc["placement"]["launcher"] == "ssh"
        assert "ssh_options" not in doc["placement"]["settings"]  # key paths stay out
        assert {r["node"]: r["address"] for r in doc["ranks"]} == {
            0: hosts.address(0), 1: hosts.address(1)
        }  # fmt: skip
