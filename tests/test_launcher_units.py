"""The launchers' commands and manifests, and the cell-wide CPU accounting, without starting
any node: what the kubernetes launcher applies, what ssh runs for an image side, the launcher
given as JSON (the reusable workflow's per-backend input), and the agents a killed peer ends."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from suite.core.errors import InputError

ENV = {"PYTHONPATH": "/src", "TORCH_MATRIX_NODE": "0", "TORCH_MATRIX_RDZV_ID": "R.c.ab12",
       "HOME": "/root", "GH_TOKEN": "secret-value", "PATH": "/usr/bin"}  # fmt: skip


def _agents(image: str | None = None) -> list:  # type: ignore[type-arg]
    from suite.execute.nodes import Agent

    return [
        Agent(i, ["python", "-m", "torch.distributed.run", "--local-addr", f"h{i}"],
              {**ENV, "TORCH_MATRIX_NODE": str(i)}, Path("/runs/r1"), image)
        for i in (0, 1)
    ]  # fmt: skip


def test_the_launcher_option_takes_json_and_null_from_the_workflow() -> None:
    from suite.execute.launchers import launcher_option

    assert launcher_option("null") == (None, {})
    assert launcher_option("") == (None, {})
    settings, where = launcher_option('{"kind": "slurm", "srun_options": ["--gpus-per-node=8"]}')
    assert settings == {"kind": "slurm", "srun_options": ["--gpus-per-node=8"]}
    assert where == {"option": "--launcher"}
    with pytest.raises(InputError, match=r"--launcher::\$.*'bogus' was unexpected"):
        launcher_option('{"kind": "slurm", "bogus": 1}')
    with pytest.raises(InputError, match="not JSON"):
        launcher_option('{"kind": ')


def test_the_kubernetes_jobset_runs_each_node_from_the_image_with_only_the_harness_env() -> None:
    from suite.execute.kube import KubernetesLauncher

    kube = KubernetesLauncher({"kind": "kubernetes", "namespace": "perf", "image": "team/x@sha256:1",
                               "node_selector": {"pool": "h100"}}, {})  # fmt: skip
    kube.begin("R.c.ab12")
    name = kube.name
    assert name.startswith("tmx-") and len(name) <= 63
    assert kube.addresses(2) == [f"{name}-node-0-0-0.{name}", f"{name}-node-1-0-0.{name}"]
    side = "registry/torch@sha256:" + "f" * 64
    doc = kube.manifest(_agents(image=side))
    assert doc["kind"] == "JobSet" and doc["spec"]["failurePolicy"] == {"maxRestarts": 0}
    for i, job in enumerate(doc["spec"]["replicatedJobs"]):
        assert job["name"] == f"node-{i}" and job["replicas"] == 1
        spec = job["template"]["spec"]
        assert spec["backoffLimit"] == 0 and spec["template"]["spec"]["restartPolicy"] == "Never"
        assert spec["template"]["spec"]["nodeSelector"] == {"pool": "h100"}
        (container,) = spec["template"]["spec"]["containers"]
        assert container["image"] == side  # the image side's own digest wins over image:
        assert container["args"][-1] == f"h{i}"
        env = {e["name"]: e["value"] for e in container["env"]}
        assert env["TORCH_MATRIX_NODE"] == str(i)
        assert not {"HOME", "PATH", "GH_TOKEN"} & set(env)
    assert "secret-value" not in str(doc)
    kube_no_image = KubernetesLauncher(
        {"kind": "kubernetes"}, {"file": "m.yaml", "path": "$.launcher"}
    )
    kube_no_image.begin("R.c.cd34")
    with pytest.raises(InputError, match="the kubernetes launcher runs images"):
        kube_no_image.manifest(_agents())


def test_ssh_runs_an_image_side_on_the_hosts_docker_and_removes_it_with_the_session() -> None:
    from suite.execute.nodes import SshLauncher

    ssh = SshLauncher({"kind": "ssh", "hosts": ["n0", "n1"]}, {})
    image = "registry/torch@sha256:" + "e" * 64
    argv, _ = ssh.start_command(_agents(image=image)[1])
    remote = argv[-1]
    assert "docker run --rm --network host --ipc host --name torch-matrix-R.c.ab12-1 " in remote
    assert "-e TORCH_MATRIX_NODE -e TORCH_MATRIX_RDZV_ID" in remote
    assert f"-v /runs/r1:/runs/r1 -w /runs/r1 {image} python -m torch.distributed.run" in remote
    assert "docker rm -f torch-matrix-R.c.ab12-1; kill -KILL -$agent" in remote
    assert "secret-value" not in remote and "GH_TOKEN" not in remote


def test_a_killed_agent_ends_its_peers_after_the_grace_not_at_the_timeout(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from suite.execute import multinode

    monkeypatch.setattr(multinode, "PEER_GRACE_S", 1.0)
    hang = [sys.executable, "-c", "import time; time.sleep(120)"]
    killed = [sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"]
    logs = [tmp_path / "n0.log", tmp_path / "n1.log"]
    exits = multinode.run_agents([(hang, None), (killed, None)], logs, timeout_s=100)
    assert exits[1].signal_name == "SIGKILL" and not exits[1].timed_out
    assert exits[0].returncode is None and not exits[0].timed_out  # stopped, not late
    status, _, message = multinode._what_failed(
        ["", ""],
        "R",
        exits,
        ["node 0 (a)", "node 1 (b)"],
        _NoBeats(),
        100,  # type: ignore[arg-type]
    )
    assert (status, message.split(";")[0]) == (
        "crashed",
        "node 1 (b): its agent was killed by SIGKILL",
    )


class _NoBeats:
    last: dict[int, float] = {}
    address = "x:1"


def test_a_cells_own_ranks_are_its_own_cpu_not_a_disturbance() -> None:
    """A rank started with the cell's torchrun run id is found by it, and its CPU seconds
    count as the cell's own; with no run id, only this process's count."""
    from suite.worker.measure import cell_cpu_s

    burn = "import time\nend = time.process_time() + 1.0\nwhile time.process_time() < end: pass\ntime.sleep(30)"
    run_id = f"test-{os.getpid()}"
    other = subprocess.Popen(
        [sys.executable, "-c", burn], env={**os.environ, "TORCHELASTIC_RUN_ID": run_id}
    )
    tick = os.sysconf("SC_CLK_TCK")
    try:
        deadline, seen = time.monotonic() + 30, 0.0
        while seen < 1.0 and time.monotonic() < deadline:
            time.sleep(0.2)
            os.environ["TORCHELASTIC_RUN_ID"] = run_id
            try:
                seen = cell_cpu_s(tick)  # the other process's second, found by its run id
            finally:
                del os.environ["TORCHELASTIC_RUN_ID"]
        assert seen >= 1.0
        assert cell_cpu_s(tick) == pytest.approx(time.process_time(), abs=0.05)
    finally:
        other.kill()
        other.wait()


_BEATER = """
import json, signal, socket, sys, time
node, address, cell, forever = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4] == "1"
host, port = address.rsplit(":", 1)
sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
told = []
signal.signal(signal.SIGTERM, lambda *_: told.append(1))  # stops beating, does not exit
beat = json.dumps({"cell": cell, "node": node}).encode()
sock.sendto(beat, (host, int(port)))
while True:
    time.sleep(0.2)
    if forever and not told:
        sock.sendto(beat, (host, int(port)))
"""


def test_the_silent_node_is_judged_at_the_timeout_not_after_the_agents_were_stopped(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Node 0 beats until it is told to stop, which takes the stop's grace; node 1 beat once.
    Only node 1 is named: the silence that stopping causes is not a fault."""
    from suite.execute import multinode

    monkeypatch.setattr(multinode, "SILENT_AFTER_S", 1.0)
    beats = multinode.Heartbeats("127.0.0.1", "R.c.1")
    try:
        agents = [
            ([sys.executable, "-c", _BEATER, str(i), beats.address, "R.c.1", str(int(i == 0))],
             None)
            for i in (0, 1)
        ]  # fmt: skip
        logs = [tmp_path / "n0.log", tmp_path / "n1.log"]
        exits = multinode.run_agents(agents, logs, timeout_s=3, stopping=beats.end)
    finally:
        beats.stop()
    assert [e.timed_out for e in exits] == [True, True]
    status, _, message = multinode._what_failed(
        ["", ""], "R", exits, ["node 0 (a)", "node 1 (b)"], beats, 3
    )
    assert status == "timeout"
    assert "node 1 (b) stopped answering" in message
    assert "node 0 (a)" not in message, message
