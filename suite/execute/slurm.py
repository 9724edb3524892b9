"""The slurm launcher: inside an allocation, one job step per node (suite/execute/nodes.py)."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

from suite.core.errors import InputError
from suite.execute.nodes import Agent, NodeLauncher


class SlurmLauncher(NodeLauncher):
    """Inside a Slurm allocation (a runner on a login node that holds one, or a batch script):
    node i's agent is one job step on the allocation's i-th host (`srun --nodes=1 --ntasks=1
    --nodelist=HOST`), which takes this process's environment; the hosts come from
    `SLURM_JOB_NODELIST`, or `hosts:` where given."""

    kind = "slurm"
    settings_allowed = NodeLauncher.settings_allowed | {"srun", "srun_options", "hosts"}

    def _hosts(self) -> list[str]:
        given = self.settings.get("hosts")
        if given:
            return [str(h) for h in given]
        listed = os.environ.get("SLURM_JOB_NODELIST") or os.environ.get("SLURM_NODELIST")
        if not listed:
            raise InputError(
                "the slurm launcher runs inside an allocation (salloc, sbatch): "
                "SLURM_JOB_NODELIST is unset here, and the launcher names no hosts:",
                **self.where,
            )
        try:
            return expand_hostlist(listed)
        except ValueError as exc:
            raise InputError(f"SLURM_JOB_NODELIST {listed!r}: {exc}", **self.where) from None

    def node_count(self) -> int | None:
        return len(self._hosts())

    def default_addresses(self, nodes: int) -> list[str]:
        return self._hosts()[:nodes]

    def start_command(self, agent: Agent) -> tuple[list[str], Mapping[str, str] | None]:
        host = self._hosts()[agent.node]
        return [
            str(self.settings.get("srun", "srun")),
            "--nodes=1", "--ntasks=1", f"--nodelist={host}", "--job-name=torch-matrix",
            "--kill-on-bad-exit=1",
            *[str(o) for o in self.settings.get("srun_options", [])],
            *agent.argv,
        ], agent.env  # fmt: skip


_RANGE = re.compile(r"^([^\[\],]*)\[([^\]]+)\](.*)$")


def expand_hostlist(text: str) -> list[str]:
    """Slurm's host list syntax: `gpu[01-03,07],login1` is gpu01, gpu02, gpu03, gpu07, login1."""
    hosts: list[str] = []
    for part in _split_top(text):
        found = _RANGE.match(part)
        if not found:
            if not part or any(c in part for c in "[]"):
                raise ValueError(f"cannot read host {part!r}")
            hosts.append(part)
            continue
        prefix, ranges, rest = found.groups()
        for item in ranges.split(","):
            low, _, high = item.partition("-")
            if not low.isdigit() or (high and not high.isdigit()):
                raise ValueError(f"cannot read the range {item!r}")
            for n in range(int(low), int(high or low) + 1):
                for tail in expand_hostlist(rest) if rest else [""]:
                    hosts.append(f"{prefix}{n:0{len(low)}d}{tail}")
    return hosts


def _split_top(text: str) -> list[str]:
    """TEXT split at the commas outside brackets."""
    parts, depth, current = [], 0, ""
    for char in text:
        depth += {"[": 1, "]": -1}.get(char, 0)
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    parts.append(current)
    return [p.strip() for p in parts]
