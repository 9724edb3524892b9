"""The kubernetes launcher: one JobSet per cell, one replicated job per node, each a single pod
of the side's image (by digest) running that node's torchrun agent.

The coordinator applies the JobSet with `kubectl`, and each node's local process follows its
pod (`python -m suite.execute.kube follow`): it waits for the pod to start, streams its log
(which carries the ranks' marked lines back), and exits with the container's exit code, so the
cell is judged exactly as on any other launcher. The JobSet is deleted when the cell ends.

JobSet gives every pod a stable name, `<jobset>-node-<i>-0-0`, under a headless service named
after the JobSet: node 0's name is the rendezvous endpoint, and each node's its own address.
"""

from __future__ import annotations

import hashlib
import json
import shlex
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from suite.core.errors import EnvironmentProblem, InputError
from suite.execute.launch import ProcessExit
from suite.execute.nodes import Agent, NodeLauncher, exported_env, remote_exit

JOBSET_API = "jobset.x-k8s.io/v1alpha2"
# How long a pod may stay unstarted (scheduling, pulling its image) before its node fails.
START_TIMEOUT_S = 600.0
# Reasons a waiting container will not start on its own.
_STUCK = frozenset(
    {"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "CreateContainerConfigError"}
)


class KubernetesLauncher(NodeLauncher):
    """Node i's agent in pod i of a JobSet applied with kubectl (README: Distributed across
    nodes). The pods run the side's image by digest, or `image:` where the side is an
    interpreter (an image holding the same suite and torch)."""

    kind = "kubernetes"
    runs_images = True
    settings_allowed = NodeLauncher.settings_allowed | {
        "kubectl",
        "namespace",
        "image",
        "resources",
        "node_selector",
    }

    def __init__(self, settings: Mapping[str, Any], where: dict[str, str]) -> None:
        super().__init__(settings, where)
        self.name = ""
        self.manifest_path: Path | None = None

    @property
    def kubectl(self) -> list[str]:
        return [str(self.settings.get("kubectl", "kubectl")), "--namespace", self.namespace]

    @property
    def namespace(self) -> str:
        return str(self.settings.get("namespace", "default"))

    def begin(self, rdzv_id: str) -> None:
        # A DNS label of its own per cell attempt: the rendezvous id is too long and too free.
        self.name = "tmx-" + hashlib.sha256(rdzv_id.encode()).hexdigest()[:12]
        self.rdzv_id = rdzv_id

    def pod_host(self, node: int) -> str:
        return f"{self.name}-node-{node}-0-0.{self.name}"

    def default_addresses(self, nodes: int) -> list[str]:
        return [self.pod_host(i) for i in range(nodes)]

    def place(self, agents: Sequence[Agent]) -> list[tuple[list[str], Mapping[str, str] | None]]:
        manifest = self.manifest(agents)
        folder = agents[0].private / "logs"
        folder.mkdir(parents=True, exist_ok=True)
        self.manifest_path = folder / f"{self.name}.jobset.json"
        self.manifest_path.write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")
        applied = self._kubectl("apply", "-f", str(self.manifest_path))
        if applied.returncode != 0:
            raise EnvironmentProblem(
                f"kubectl apply of the cell's JobSet {self.manifest_path} failed: "
                f"{applied.stderr.strip()[-500:]}"
            )
        follow = [sys.executable, "-m", "suite.execute.kube", "follow", "--namespace",
                  self.namespace, "--kubectl", self.kubectl[0], "--jobset", self.name]  # fmt: skip
        return [([*follow, "--node", str(agent.node)], None) for agent in agents]

    def finish(self) -> None:
        if self.name:
            self._kubectl("delete", "jobset", self.name, "--ignore-not-found", "--wait=false")

    def reported(self, outcome: ProcessExit) -> ProcessExit:
        return remote_exit(outcome)  # a container's 128+n is signal n

    def manifest(self, agents: Sequence[Agent]) -> dict[str, Any]:
        """The cell's JobSet: one replicated job per node, its pod running that agent."""
        image = agents[0].image or self.settings.get("image")
        if not image:
            raise InputError(
                "the kubernetes launcher runs images: this side is an interpreter, so name "
                "the image its pods run (image: registry/name@sha256:...), or run an image side",
                **self.where,
            )
        return {
            "apiVersion": JOBSET_API,
            "kind": "JobSet",
            "metadata": {
                "name": self.name,
                "labels": {"app.kubernetes.io/managed-by": "torch-matrix"},
                "annotations": {"torch-matrix/rdzv-id": self.rdzv_id},
            },
            "spec": {
                "failurePolicy": {"maxRestarts": 0},
                "network": {"enableDNSHostnames": True, "publishNotReadyAddresses": True},
                "replicatedJobs": [
                    {"name": f"node-{a.node}", "replicas": 1, "template": self._job(a, image)}
                    for a in agents
                ],
            },
        }

    def _job(self, agent: Agent, image: str) -> dict[str, Any]:
        folder = str(agent.private)
        container: dict[str, Any] = {
            "name": "agent",
            "image": image,
            "command": ["sh", "-c", 'mkdir -p "$0" && cd "$0" && exec "$@"', folder],
            "args": list(agent.argv),
            "env": [{"name": k, "value": v} for k, v in exported_env(agent.env).items()],
        }
        if self.settings.get("resources"):
            container["resources"] = self.settings["resources"]
        pod: dict[str, Any] = {"restartPolicy": "Never", "containers": [container]}
        if self.settings.get("node_selector"):
            pod["nodeSelector"] = self.settings["node_selector"]
        return {
            "spec": {
                "parallelism": 1,
                "completions": 1,
                "backoffLimit": 0,
                "template": {"spec": pod},
            }
        }

    def evidence(self) -> dict[str, Any]:
        return {**super().evidence(), "jobset": self.name}

    def _kubectl(self, *args: str) -> subprocess.CompletedProcess[str]:
        try:
            return subprocess.run(
                [*self.kubectl, *args], capture_output=True, text=True, timeout=120, check=False
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise EnvironmentProblem(f"kubectl {args[0]}: {exc}") from None


def _pod(kubectl: list[str], jobset: str, node: int) -> dict[str, Any] | None:
    selector = (
        f"jobset.sigs.k8s.io/jobset-name={jobset},jobset.sigs.k8s.io/replicatedjob-name=node-{node}"
    )
    got = subprocess.run(
        [*kubectl, "get", "pods", "-l", selector, "-o", "json"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    if got.returncode != 0:
        return None
    items = json.loads(got.stdout or "{}").get("items") or []
    return items[0] if items else None


def _state(pod: Mapping[str, Any]) -> dict[str, Any]:
    statuses = pod.get("status", {}).get("containerStatuses") or [{}]
    return dict(statuses[0].get("state") or {})


def follow(kubectl: list[str], jobset: str, node: int) -> int:
    """Node NODE's pod: wait until it starts, stream its log here, exit with its code."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        pod = _pod(kubectl, jobset, node)
        state = _state(pod) if pod else {}
        if "running" in state or "terminated" in state:
            break
        reason = (state.get("waiting") or {}).get("reason")
        if reason in _STUCK or time.monotonic() > deadline:
            print(f"node {node}'s pod did not start: {reason or 'not scheduled in time'}")
            return 125
        time.sleep(1.0)
    name = pod["metadata"]["name"] if pod else ""
    subprocess.run([*kubectl, "logs", "-f", f"pod/{name}"], check=False)
    while True:
        pod = _pod(kubectl, jobset, node)
        ended = _state(pod).get("terminated") if pod else None
        if ended is not None:
            return int(ended.get("exitCode", 1))
        time.sleep(0.5)


def main(argv: Sequence[str]) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m suite.execute.kube")
    parser.add_argument("command", choices=["follow"])
    parser.add_argument("--kubectl", default="kubectl")
    parser.add_argument("--namespace", default="default")
    parser.add_argument("--jobset", required=True)
    parser.add_argument("--node", type=int, required=True)
    args = parser.parse_args(argv)
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    kubectl = [args.kubectl, "--namespace", args.namespace]
    print(f"following {shlex.join([*kubectl, 'logs', '-f'])} of {args.jobset} node {args.node}")
    return follow(kubectl, args.jobset, args.node)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
