"""Node launchers that need no namespaces: several nodes on this host (local), and Slurm through
a stand-in srun that records how it was called and runs each step here. A real Slurm cluster is
not tested."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from suite.core.results import read_result
from tests.helpers import REPO, TESTS, THREADS_ENV

# Several agents and ranks at once: never beside another such test or one that reads timed
# rounds; the A/B below fixes its rounds and asserts no timing verdict.
pytestmark = [pytest.mark.slow, pytest.mark.heavy]
SRUN = TESTS / "standins" / "srun"
CELL = "collectives.all_reduce.1KiB.c10d.n2x1@cpu"
MATRIX = """\
version: 1
backends: [cpu]
workloads:
  - workload: collectives
    grid: {op: [all_reduce], size: [1KiB], api: [c10d]}
    world: {nodes: [2], ranks_per_node: [1]}
"""


def run(tmp_path: Path, text: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    matrix = tmp_path / "m.yaml"
    matrix.write_text(text)
    return subprocess.run(
        [sys.executable, "-m", "suite", "run", "--matrix", str(matrix), "--out",
         str(tmp_path / "run")],
        cwd=REPO, env={**os.environ, **THREADS_ENV, **env}, capture_output=True, text=True,
        timeout=600,
    )  # fmt: skip


def test_slurm_places_one_step_per_node_of_the_allocation(tmp_path: Path) -> None:
    log = tmp_path / "standin.jsonl"
    launcher = (
        f"launcher:\n  kind: slurm\n  srun: {SRUN}\n  srun_options: ['--cpu-bind=none']\n"
        "  address: [127.0.0.1, 127.0.0.1]\n  port: 29411\n"
    )
    env = {"SLURM_JOB_NODELIST": "cn[07-08]", "TORCH_MATRIX_STANDIN_LOG": str(log)}
    done = run(tmp_path, MATRIX + launcher, env)
    assert done.returncode == 0, done.stderr[-3000:]
    doc = read_result(tmp_path / "run" / "cells" / f"{CELL}.json")
    assert doc["status"] == "ok", doc["failure"]
    assert doc["placement"]["launcher"] == "slurm"
    calls = sorted((json.loads(line) for line in log.read_text().splitlines()),
                   key=lambda c: c["node"])  # fmt: skip
    assert [c["node"] for c in calls] == ["0", "1"]
    for node, call in enumerate(calls):
        assert call["options"] == [
            "--nodes=1", "--ntasks=1", f"--nodelist=cn0{7 + node}", "--job-name=torch-matrix",
            "--kill-on-bad-exit=1", "--cpu-bind=none",
        ]  # fmt: skip
        command = call["command"]
        assert command[1:3] == ["-m", "torch.distributed.run"]
        assert command[command.index("--rdzv-endpoint") + 1] == "127.0.0.1:29411"
    assert sorted(r["node"] for r in doc["ranks"]) == [0, 1]


def test_slurm_outside_an_allocation_is_an_input_error_naming_the_launcher(
    tmp_path: Path,
) -> None:
    env = {k: "" for k in ("SLURM_JOB_NODELIST", "SLURM_NODELIST")}
    done = run(tmp_path, MATRIX + f"launcher: {{kind: slurm, srun: {SRUN}}}\n", env)
    assert done.returncode == 2
    assert "m.yaml::$.launcher: the slurm launcher runs inside an allocation" in done.stderr


def test_two_nodes_on_this_host_without_a_launcher(tmp_path: Path) -> None:
    """No launcher named: every node is this host, each its own agent and rendezvous member."""
    done = run(tmp_path, MATRIX, {})
    assert done.returncode == 0, done.stderr[-3000:]
    doc = read_result(tmp_path / "run" / "cells" / f"{CELL}.json")
    assert doc["status"] == "ok" and doc["correctness"]["passed"]
    assert [(r["node"], r["node_rank"], r["local_rank"]) for r in doc["ranks"]] == [
        (0, 0, 0), (1, 1, 0)
    ]  # fmt: skip
    assert doc["placement"]["rendezvous"].startswith("127.0.0.1:")


POLICY = """\
version: 1
kind: torch-matrix/policy
default_profile: scaling
rules:
  - {severity: soft, verdicts: [fail], decision: defer, reason: "a performance gate regressed"}
profiles:
  scaling:
    description: "Scaling only."
    fleet_backends: [cpu]
    isolatable: []
    statistics: {looks: [2], fail_level: 0.01, pass_level: 0.05, budget_s: 600}
    gates:
      status:     {severity: hard, required: true}
      throughput: {severity: info, threshold: 0.5}
      scaling:    {severity: soft, threshold: 0.5}
"""


def test_an_ab_across_worlds_has_a_scaling_row_with_both_pins_efficiencies(
    tmp_path: Path,
) -> None:
    """One node and two, of two ranks each, on this host, an A/A of this interpreter: the
    scaling cell joins the case's row with both efficiencies. Its verdict is the machine's
    timing (not asserted here; tests/test_scaling.py holds the gate's logic on planted
    records)."""
    matrix = tmp_path / "m.yaml"
    matrix.write_text(
        MATRIX.replace("nodes: [2], ranks_per_node: [1]", "nodes: [1, 2], ranks_per_node: [2]")
    )
    policy = tmp_path / "p.yaml"
    policy.write_text(POLICY)
    done = subprocess.run(
        [sys.executable, "-m", "suite", "ab", "--baseline", sys.executable, "--candidate",
         "current", "--matrix", str(matrix), "--policy", str(policy), "--rounds", "2", "--reruns", "3", "--out",
         str(tmp_path / "ab"), "--format", "json"],
        cwd=REPO, env={**os.environ, **THREADS_ENV}, capture_output=True, text=True,
        timeout=900,
    )  # fmt: skip
    assert done.stdout.startswith("{"), done.stderr[-3000:]
    decision = json.loads(done.stdout)
    (cell,) = [c for c in decision["cells"] if c["cell_id"].startswith("scaling.")]
    assert cell["cell_id"] == "scaling.collectives.all_reduce.1KiB.c10d.n2x2-over-n1x2@cpu"
    assert cell["row_id"] == "collectives@cpu"
    (gate,) = cell["gates"]
    assert gate["verdict"] in ("pass", "fail", "improved", "inconclusive"), gate["message"]
    # --rounds 2, a disturbed round run again (nothing heavy beside it), and left out if it stays
    assert gate["baseline"] > 0 and gate["candidate"] > 0 and 1 <= gate["rounds"] <= 2
    assert "### Scaling" in (tmp_path / "ab" / "decision.md").read_text()
