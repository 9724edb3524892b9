"""The frozen cell spec that keys everything: workload case x backend x profile."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from suite.core.backends import backend_entry

# What a workload parameter may take: a plain JSON scalar.
ParamValue = str | int | float | bool


_UNSAFE = re.compile(r"[^A-Za-z0-9_=+-]+")


def _token(value: ParamValue) -> str:
    text = ("true" if value else "false") if isinstance(value, bool) else str(value)
    return _UNSAFE.sub("-", text).strip("-") or "x"


@dataclass(frozen=True)
class CellSpec:
    workload: str
    ref: str
    params: tuple[tuple[str, ParamValue], ...]
    backend: str
    profile: str
    lane: str = "production"
    size_tag: str | None = None
    timeout_s: float = 600.0
    ranks: int = 1  # processes per node; above 1 (or above one node) it runs under torchrun
    nodes: int = 1  # the nodes (hosts) its ranks are placed on, one torchrun agent each
    distributed: bool = False  # a workload that takes a world: its cell id names the world
    restarts: int = 0  # torchrun's --max-restarts: a cell whose fault kills a rank restarts

    @property
    def world_size(self) -> int:
        return self.nodes * self.ranks

    @property
    def world_tag(self) -> str | None:
        """The world in the cell id, nodes x ranks per node: n2x2 is four ranks on two nodes."""
        return f"n{self.nodes}x{self.ranks}" if self.distributed else None

    @property
    def params_dict(self) -> dict[str, ParamValue]:
        return dict(self.params)

    @property
    def cell_id(self) -> str:
        parts = [_token(self.workload)] + [_token(v) for _, v in self.params]
        if self.size_tag:
            parts.append(_token(self.size_tag))
        if self.world_tag:
            parts.append(self.world_tag)
        return ".".join(parts) + "@" + self.backend

    @property
    def case_id(self) -> str:
        """The cell id without the backend: one row of a report."""
        return self.cell_id.rsplit("@", 1)[0]

    def as_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "workload": self.workload,
            "ref": self.ref,
            "params": self.params_dict,
            "backend": self.backend,
            "profile": self.profile,
            "lane": self.lane,
        }
        if self.distributed:
            data["world"] = {"nodes": self.nodes, "ranks_per_node": self.ranks}
        return data

    @property
    def spec_hash(self) -> str:
        return spec_hash(self.as_dict())

    def to_json(self) -> str:
        data = self.as_dict()
        data["params"] = [list(p) for p in self.params]
        data["size_tag"] = self.size_tag
        data["timeout_s"] = self.timeout_s
        data["ranks"] = self.ranks
        data["nodes"] = self.nodes
        data["distributed"] = self.distributed
        data["restarts"] = self.restarts
        return json.dumps(data, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> CellSpec:
        data = json.loads(text)
        return cls(
            workload=data["workload"],
            ref=data["ref"],
            params=tuple((str(k), v) for k, v in data["params"]),
            backend=data["backend"],
            profile=data["profile"],
            lane=data["lane"],
            size_tag=data.get("size_tag"),
            timeout_s=float(data.get("timeout_s", 600.0)),
            ranks=int(data.get("ranks", 1)),
            nodes=int(data.get("nodes", 1)),
            distributed=bool(data.get("distributed", False)),
            restarts=int(data.get("restarts", 0)),
        )


def spec_hash(spec: Mapping[str, Any]) -> str:
    canonical = json.dumps(spec, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


# Workloads whose setup compiles or exports a sweep of graphs before the step (several compiles,
# AOTInductor, ONNX): under Valgrind that costs many minutes a count. A cell that compiles its
# one step (mode=compiled) is counted: its compile is the cold call, outside the count, and
# the counted step runs the generated kernels (~40 s a count, suite/execute/counting.py).
COMPILING = frozenset({"compile", "export"})


def countable(workload: str, backend: str, params: Mapping[str, Any], ranks: int = 1) -> bool:
    """Whether the instructions gate applies to a cell: one CPU rank (a GPU's work is not the
    host's instructions), not a compile or export sweep."""
    return backend_entry(backend).host and ranks <= 1 and workload not in COMPILING
