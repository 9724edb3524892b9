"""Where a distributed cell's nodes run: the node launchers, one registry entry each.

The coordinator (this process) builds each node's torchrun command; a launcher turns it into a
local process that starts that agent on its node (directly, inside a network namespace, over
ssh) and says where the node is reached. Every agent's output comes back through that process,
which is how results reach the coordinator with no shared filesystem.

A launcher is named in the matrix (`launcher: {kind: ssh, hosts: [a, b]}`) or on the command
line (`--launcher FILE`, a YAML mapping of the same shape, or a bare kind: `--launcher local`).
"""

from __future__ import annotations

import re
import shlex
import socket
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from suite.core.errors import InputError
from suite.execute.launch import ProcessExit, signal_name

if TYPE_CHECKING:
    pass

DEFAULT_PORT = 29500


@dataclass(frozen=True)
class Agent:
    """One node's torchrun agent, as the coordinator hands it to a launcher."""

    node: int
    argv: Sequence[str]  # python -m torch.distributed.run ... -m suite.worker cell ...
    env: Mapping[str, str]  # the agent's whole environment, world variables included
    private: Path  # the run folder: a node of its own may see it empty (local netns)
    image: str | None = None  # the side's image by digest, where the side is an image


class NodeLauncher:
    """Places one agent per node. Subclasses register under their `kind`."""

    kind: ClassVar[str] = ""
    runs_images: ClassVar[bool] = False  # can start an image side's agents on its nodes
    settings_allowed: ClassVar[frozenset[str]] = frozenset({"kind", "address", "port"})

    def __init__(self, settings: Mapping[str, Any], where: dict[str, str]) -> None:
        takes = self.settings_allowed | {"interface", "join_timeout"}
        extra = sorted(set(settings) - takes)
        if extra:
            raise InputError(
                f"launcher {self.kind!r} takes no {extra[0]!r} (it takes: "
                f"{', '.join(sorted(takes))})",
                **where,
            )
        self.settings = dict(settings)
        self.where = where
        self.interface: str | None = settings.get("interface")
        self.join_timeout_s: float | None = settings.get("join_timeout")

    # Overridden per kind.
    def node_count(self) -> int | None:
        """How many nodes it can place; None: any number (one host runs them all)."""
        return None

    def addresses(self, nodes: int) -> list[str]:
        given = self.settings.get("address")
        if given:
            if len(given) < nodes:
                raise InputError(
                    f"the launcher names {len(given)} addresses for a cell of {nodes} nodes",
                    **self.where,
                )
            return [str(a) for a in given[:nodes]]
        return self.default_addresses(nodes)

    def default_addresses(self, nodes: int) -> list[str]:
        return ["127.0.0.1"] * nodes

    def port(self) -> int:
        return int(self.settings.get("port") or DEFAULT_PORT)

    def start_command(self, agent: Agent) -> tuple[list[str], Mapping[str, str] | None]:
        """The local process that starts AGENT on its node, and its environment."""
        return list(agent.argv), agent.env

    def begin(self, rdzv_id: str) -> None:
        """Called first for each cell, with its rendezvous id (before addresses)."""

    def place(self, agents: Sequence[Agent]) -> list[tuple[list[str], Mapping[str, str] | None]]:
        """The local processes that start the cell's agents, one per node."""
        return [self.start_command(agent) for agent in agents]

    def finish(self) -> None:
        """Called after the cell's agents ended or were stopped: whatever place() left."""

    @property
    def plain(self) -> bool:
        """Every node is this host, as it is: a one-node cell needs no launcher at all."""
        return False

    def reported(self, outcome: ProcessExit) -> ProcessExit:
        """An agent's end as the coordinator reads it (a remote shell reports a signal as an
        exit code above 128)."""
        return outcome

    def evidence(self) -> dict[str, Any]:
        return {k: v for k, v in self.settings.items() if k != "ssh_options"}

    def check_nodes(self, nodes: int) -> None:
        can = self.node_count()
        if can is not None and nodes > can:
            raise InputError(
                f"a cell of {nodes} nodes, but the {self.kind} launcher places {can}",
                **self.where,
            )


def remote_exit(outcome: ProcessExit) -> ProcessExit:
    """An exit a remote shell or a container reported: 128+n is signal n."""
    code = outcome.returncode
    if code is not None and 128 < code < 128 + 65:
        return replace(outcome, returncode=-(code - 128), signal_name=signal_name(128 - code))
    return outcome


def route_from_here(address: str) -> str:
    """This host's address on the route to ADDRESS (where the nodes reach the coordinator)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect((address, DEFAULT_PORT))  # a datagram socket: nothing is sent
        return str(probe.getsockname()[0])


class LocalLauncher(NodeLauncher):
    """Every agent on this host; with `netns`, node i's in network namespace i, under a host
    name of its own and with a private, empty tmpfs over the run folder."""

    kind = "local"
    settings_allowed = NodeLauncher.settings_allowed | {"netns"}

    def node_count(self) -> int | None:
        netns = self.settings.get("netns")
        return len(netns) if netns else None

    @property
    def plain(self) -> bool:
        return not self.settings.get("netns")

    def default_addresses(self, nodes: int) -> list[str]:
        netns = self.settings.get("netns")
        if not netns:
            return ["127.0.0.1"] * nodes
        return [self._netns_address(str(ns)) for ns in netns[:nodes]]

    def port(self) -> int:
        if self.settings.get("port") or self.settings.get("netns"):
            return super().port()
        with socket.socket() as free:  # every node is this host: a free port of its own
            free.bind(("127.0.0.1", 0))
            return int(free.getsockname()[1])

    def _netns_address(self, ns: str) -> str:
        argv = ["ip", "-n", ns, "-4", "-o", "addr", "show", "scope", "global"]
        if self.interface:
            argv[7:7] = ["dev", self.interface]
        try:
            shown = subprocess.run(argv, capture_output=True, text=True, timeout=10, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise InputError(f"cannot read network namespace {ns!r}: {exc}", **self.where) from None
        for line in shown.stdout.splitlines():
            fields = line.split()
            if "inet" in fields:
                return fields[fields.index("inet") + 1].split("/")[0]
        raise InputError(
            f"network namespace {ns!r} has no IPv4 address "
            f"({shown.stderr.strip() or 'ip showed none'})",
            **self.where,
        )

    def start_command(self, agent: Agent) -> tuple[list[str], Mapping[str, str] | None]:
        netns = self.settings.get("netns")
        if not netns:
            return list(agent.argv), agent.env
        script = (
            'hostname "$1" && mount -t tmpfs tmpfs "$2" && mkdir "$2/.tmp" '
            '&& export TMPDIR="$2/.tmp" && shift 2 && exec "$@"'
        )
        return [
            "ip", "netns", "exec", str(netns[agent.node]),
            "unshare", "--mount", "--uts", "--propagation", "private",
            "sh", "-c", script, "sh", f"{netns[agent.node]}", str(agent.private),
            *agent.argv,
        ], agent.env  # fmt: skip


class SshLauncher(NodeLauncher):
    """Node i's agent on host i, over ssh in batch mode (keys, never a password). The host runs
    the same interpreter path with this suite importable at the same path, or the side's image.
    The agent stops when the ssh connection closes (its standard input ends), so a cell killed
    here is killed there."""

    kind = "ssh"
    runs_images = True
    settings_allowed = NodeLauncher.settings_allowed | {"hosts", "ssh_options"}

    def __init__(self, settings: Mapping[str, Any], where: dict[str, str]) -> None:
        super().__init__(settings, where)
        if not settings.get("hosts"):
            raise InputError("the ssh launcher needs hosts: [node0, node1, ...]", **where)

    def node_count(self) -> int | None:
        return len(self.settings["hosts"])

    def reported(self, outcome: ProcessExit) -> ProcessExit:
        return remote_exit(outcome)

    def default_addresses(self, nodes: int) -> list[str]:
        return [str(h).rpartition("@")[2] for h in self.settings["hosts"][:nodes]]

    def start_command(self, agent: Agent) -> tuple[list[str], Mapping[str, str] | None]:
        # Only what the harness set travels: the remote host keeps its own PATH and HOME.
        exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in exported_env(agent.env).items())
        run, stop = shlex.join(agent.argv), "kill -KILL -$agent"
        if agent.image:  # the side's image, by digest, on the host's own Docker
            name = f"torch-matrix-{agent.env.get('TORCH_MATRIX_RDZV_ID', 'cell')}-{agent.node}"
            name = re.sub(r"[^A-Za-z0-9_.-]", "-", name)[:120]
            flags = " ".join(f"-e {k}" for k in exported_env(agent.env))
            folder = shlex.quote(str(agent.private))
            run = (
                f"docker run --rm --network host --ipc host --name {name} {flags} "
                f"-v {folder}:{folder} -w {folder} {shlex.quote(agent.image)} {run}"
            )
            stop = f"docker rm -f {name}; {stop}"
        # The agent runs in the background; when ssh's standard input ends (the coordinator
        # closed it or died), its whole process group is stopped. A background job's input
        # is /dev/null in a shell without job control: the watcher reads the session's input
        # through fd 3, and holds none of its output, so the session ends when the agent does.
        remote = (
            f"mkdir -p {shlex.quote(str(agent.private))} && cd {shlex.quote(str(agent.private))} "
            f"&& exec 3<&0 && {{ env {exports} setsid {run} </dev/null & "
            f"agent=$!; ( cat <&3 >/dev/null; {stop} ) >/dev/null 2>&1 & watcher=$!; "
            "wait $agent; code=$?; kill $watcher 2>/dev/null; exit $code; }"
        )
        options = [str(o) for o in self.settings.get("ssh_options", [])]
        host = str(self.settings["hosts"][agent.node])
        return [
            "ssh", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=accept-new",
            *options, host, remote,
        ], None  # fmt: skip


_REMOTE_ENV = frozenset({"PYTHONPATH", "PYTHONUNBUFFERED", "OMP_NUM_THREADS"})


def exported_env(env: Mapping[str, str]) -> dict[str, str]:
    """What of an agent's environment travels to another host: what the harness set, never
    the coordinator's own PATH, HOME or credentials."""
    return {
        k: v
        for k, v in sorted(env.items())
        if k in _REMOTE_ENV or k.startswith(("TORCH_MATRIX_", "GLOO_", "NCCL_", "TORCHINDUCTOR_"))
    }
