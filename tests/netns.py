"""Several "hosts" on this machine for the multi-node tests: network namespaces on a bridge,
each with its own address (root only; CI runs as root)."""

from __future__ import annotations

import os
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path


def can_make_namespaces() -> str | None:
    """Why no namespaces can be made here, or None."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    try:
        subprocess.run(["ip", "-V"], capture_output=True, check=True)
        subprocess.run(["unshare", "--version"], capture_output=True, check=True)
    except (OSError, subprocess.CalledProcessError) as exc:
        return f"ip (iproute2) and unshare are needed: {exc}"
    return None


def _ip(*args: str, check: bool = True) -> None:
    subprocess.run(["ip", *args], check=check, capture_output=True, timeout=30)


@dataclass(frozen=True)
class Hosts:
    """COUNT namespaces named {tag}-n{i} on bridge {tag}b, at 10.{net}.0.{i + 1}; this host
    is 10.{net}.0.254 on the bridge. Each namespace's interface is eth0."""

    tag: str
    net: int
    count: int

    @property
    def names(self) -> list[str]:
        return [f"{self.tag}-n{i}" for i in range(self.count)]

    def address(self, i: int) -> str:
        return f"10.{self.net}.0.{i + 1}"

    @property
    def bridge(self) -> str:
        return f"{self.tag}b"

    def create(self) -> Hosts:
        self.remove()
        _ip("link", "add", self.bridge, "type", "bridge")
        _ip("addr", "add", f"10.{self.net}.0.254/24", "dev", self.bridge)
        _ip("link", "set", self.bridge, "up")
        for i, ns in enumerate(self.names):
            _ip("netns", "add", ns)
            _ip("link", "add", f"{self.tag}v{i}", "type", "veth", "peer", "name", "eth0",
                "netns", ns)  # fmt: skip
            _ip("link", "set", f"{self.tag}v{i}", "master", self.bridge, "up")
            _ip("-n", ns, "addr", "add", f"{self.address(i)}/24", "dev", "eth0")
            _ip("-n", ns, "link", "set", "eth0", "up")
            _ip("-n", ns, "link", "set", "lo", "up")
        return self

    def link(self, i: int, up: bool) -> None:
        """Node i's cable, in or out."""
        _ip("-n", self.names[i], "link", "set", "eth0", "up" if up else "down")

    def remove(self) -> None:
        for i, ns in enumerate(self.names):
            _ip("netns", "del", ns, check=False)
            _ip("link", "del", f"{self.tag}v{i}", check=False)
        _ip("link", "del", self.bridge, check=False)

    def pids(self, i: int) -> list[int]:
        shown = subprocess.run(
            ["ip", "netns", "pids", self.names[i]], capture_output=True, text=True, timeout=30
        )
        return [int(p) for p in shown.stdout.split()]

    def launcher_yaml(self, **extra: object) -> str:
        lines = [
            "launcher:",
            "  kind: local",
            f"  netns: [{', '.join(self.names)}]",
            "  interface: eth0",
        ]
        lines += [f"  {k}: {v}" for k, v in extra.items()]
        return "\n".join(lines) + "\n"


def hosts_for(worker: str, count: int = 2) -> Hosts:
    """Names and a subnet of their own for one test process (xdist runs two side by side)."""
    number = int("".join(c for c in worker if c.isdigit()) or "0")
    return Hosts(tag=f"tmx{os.getpid() % 1000}", net=100 + number % 100, count=count)


@dataclass
class Sshd:
    """A real OpenSSH server in each namespace, keys made for the test: root may log in with
    the test's key only."""

    hosts: Hosts
    folder: Path
    procs: list[subprocess.Popen[bytes]]

    @property
    def key(self) -> Path:
        return self.folder / "id_ed25519"

    def launcher_yaml(self) -> str:
        hosts = ", ".join(f"root@{self.hosts.address(i)}" for i in range(self.hosts.count))
        options = [
            "-i", str(self.key), "-F", "/dev/null",
            "-o", f"UserKnownHostsFile={self.folder / 'known_hosts'}",
            "-o", "ConnectTimeout=10",
        ]  # fmt: skip
        return (
            f"launcher:\n  kind: ssh\n  hosts: [{hosts}]\n  interface: eth0\n"
            f"  ssh_options: [{', '.join(repr(o) for o in options)}]\n"
        )

    def stop(self) -> None:
        for proc in self.procs:
            proc.kill()
            proc.wait()


def start_sshd(hosts: Hosts, folder: Path) -> Sshd:
    folder.mkdir(parents=True, exist_ok=True)
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # its privilege separation folder
    keygen = ["ssh-keygen", "-q", "-t", "ed25519", "-N", ""]
    subprocess.run([*keygen, "-f", str(folder / "host_key")], check=True)
    subprocess.run([*keygen, "-f", str(folder / "id_ed25519")], check=True)
    (folder / "authorized_keys").write_bytes((folder / "id_ed25519.pub").read_bytes())
    procs = []
    for i, ns in enumerate(hosts.names):
        config = folder / f"sshd_config.{i}"
        config.write_text(
            f"ListenAddress {hosts.address(i)}\nPort 22\nHostKey {folder / 'host_key'}\n"
            f"AuthorizedKeysFile {folder / 'authorized_keys'}\nPermitRootLogin prohibit-password\n"
            "PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\n"
            f"StrictModes no\nPidFile {folder / f'sshd.{i}.pid'}\n"
        )
        procs.append(
            subprocess.Popen(
                ["ip", "netns", "exec", ns, "/usr/sbin/sshd", "-D", "-e", "-f", str(config)],
                stdout=subprocess.DEVNULL,
                stderr=open(folder / f"sshd.{i}.log", "wb"),  # noqa: SIM115
            )
        )
    sshd = Sshd(hosts, folder, procs)
    deadline = time.monotonic() + 30
    for i in range(hosts.count):
        while True:
            try:
                with socket.create_connection((hosts.address(i), 22), timeout=1):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    sshd.stop()
                    raise RuntimeError(f"sshd in {hosts.names[i]} never listened") from None
                time.sleep(0.2)
    return sshd
