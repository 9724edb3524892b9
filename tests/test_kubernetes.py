"""The kubernetes launcher through a stand-in kubectl (tests/standins/kubectl): a one-machine
"cluster" that records each call and runs each JobSet pod here, with cluster DNS emulated by
a private /etc/hosts per pod (a mount namespace: root). A real cluster is not tested."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from suite.core.results import read_result
from tests.helpers import REPO, TESTS, THREADS_ENV

pytestmark = [
    pytest.mark.slow,
    pytest.mark.heavy,  # two agents and their ranks at once
    pytest.mark.skipif(os.geteuid() != 0, reason="the stand-in's pods need a mount namespace"),
]
KUBECTL = TESTS / "standins" / "kubectl"
DIST = TESTS / "plugins" / "dist_planted.py"
IMAGE = "registry.example/torch-matrix/cpu@sha256:" + "ab" * 32


def _free_port() -> int:
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        return int(free.getsockname()[1])


def _start(tmp_path: Path, workload: str, timeout: int = 300) -> subprocess.Popen[str]:
    matrix = tmp_path / "m.yaml"
    matrix.write_text(
        f"version: 1\nbackends: [cpu]\nworkloads:\n{workload}"
        f"launcher:\n  kind: kubernetes\n  kubectl: {KUBECTL}\n  namespace: perf\n"
        f"  image: {IMAGE}\n  port: {_free_port()}\n"
        "  resources: {limits: {cpu: '1'}}\n"
    )
    env = {
        **os.environ, **THREADS_ENV,
        "TORCH_MATRIX_STANDIN_LOG": str(tmp_path / "calls.jsonl"),
        "TORCH_MATRIX_KUBE_STATE": str(tmp_path / "cluster"),
    }  # fmt: skip
    return subprocess.Popen(
        [sys.executable, "-m", "suite", "run", "--matrix", str(matrix), "--out",
         str(tmp_path / "run"), "--timeout", str(timeout)],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def _calls(tmp_path: Path) -> list[dict[str, Any]]:
    lines = (tmp_path / "calls.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


def test_a_jobset_of_the_image_runs_each_node_as_a_pod(tmp_path: Path) -> None:
    proc = _start(
        tmp_path,
        "  - workload: collectives\n    grid: {op: [all_reduce], size: [1KiB], api: [c10d]}\n"
        "    world: {nodes: [2], ranks_per_node: [1]}\n",
    )
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err[-3000:]
    doc = read_result(tmp_path / "run" / "cells" / "collectives.all_reduce.1KiB.c10d.n2x1@cpu.json")
    assert doc["status"] == "ok" and doc["correctness"]["passed"], doc["failure"]
    placement = doc["placement"]
    jobset = placement["settings"]["jobset"]
    assert placement["launcher"] == "kubernetes"
    assert placement["rendezvous"].startswith(f"{jobset}-node-0-0-0.{jobset}:")
    assert [(r["node"], r["host"]) for r in doc["ranks"]] == [
        (0, f"{jobset}-node-0-0"), (1, f"{jobset}-node-1-0")
    ] or sorted(r["node"] for r in doc["ranks"]) == [0, 1]  # fmt: skip
    calls = _calls(tmp_path)
    (applied,) = [c["manifest"] for c in calls if c["args"] == ["apply"]]
    assert applied["apiVersion"] == "jobset.x-k8s.io/v1alpha2"
    assert applied["metadata"]["annotations"]["torch-matrix/rdzv-id"] == placement["rdzv_id"]
    jobs = applied["spec"]["replicatedJobs"]
    assert [j["name"] for j in jobs] == ["node-0", "node-1"]
    for node, job in enumerate(jobs):
        (container,) = job["template"]["spec"]["template"]["spec"]["containers"]
        assert container["image"] == IMAGE
        assert container["resources"] == {"limits": {"cpu": "1"}}
        args = container["args"]
        assert args[1:3] == ["-m", "torch.distributed.run"]
        assert args[args.index("--local-addr") + 1] == f"{jobset}-node-{node}-0-0.{jobset}"
        names = {e["name"] for e in container["env"]}
        assert "PATH" not in names and "HOME" not in names  # the image keeps its own
        assert {"TORCH_MATRIX_NODE", "TORCH_MATRIX_RDZV_ID"} <= names
    verbs = [c["args"][2] for c in calls if c["args"] != ["apply"]]
    assert verbs[0] == "apply" and verbs[-1] == "delete"
    assert all(c["args"][:2] == ["--namespace", "perf"] for c in calls if c["args"] != ["apply"])


def _pod_of(tmp_path: Path, node: int) -> dict[str, Any]:
    for path in (tmp_path / "cluster" / "pods").glob(f"*-node-{node}-0-*.json"):
        pod = json.loads(path.read_text())
        if "running" in pod["state"]:
            return dict(pod)
    raise LookupError(node)


def test_a_killed_pod_crashes_the_cell_naming_its_node(tmp_path: Path) -> None:
    proc = _start(
        tmp_path,
        f"  - workload: '{DIST}:Hold'\n    grid: {{seconds: [300]}}\n    world: {{nodes: [2]}}\n",
    )
    deadline = time.monotonic() + 180
    pods = tmp_path / "cluster" / "pods"
    while not any("holding on rank" in p.read_text() for p in pods.glob("*.log")):
        assert time.monotonic() < deadline, "the cell's ranks never all joined"
        time.sleep(0.5)
    os.killpg(_pod_of(tmp_path, 1)["pid"], signal.SIGKILL)  # as a pod deletion kills its tree
    proc.communicate(timeout=300)
    assert proc.returncode == 1
    (path,) = (tmp_path / "run" / "cells").glob("*.json")
    doc = read_result(path)
    assert doc["status"] == "crashed", doc["failure"]
    assert doc["failure"]["message"].startswith("node 1 (")
    assert "its agent was killed by SIGKILL" in doc["failure"]["message"]
    assert [c["args"][2] for c in _calls(tmp_path) if c["args"] != ["apply"]][-1] == "delete"
