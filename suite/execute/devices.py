"""The devices a container gets for a backend, one builder (Devices) for both the Docker SDK's
options and the flags of a pasted docker run line."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Devices:
    """What a backend's container needs of the host's devices; the SDK options and the
    `docker run` flags both come from this, so the two cannot drift apart."""

    gpus: bool = False  # NVIDIA Container Toolkit: every GPU
    nodes: tuple[str, ...] = ()  # device nodes, passed through read-write-mknod
    groups: tuple[str, ...] = ()  # supplementary groups that may open them


def devices(backend: str | None) -> Devices:
    if backend == "cuda":
        return Devices(gpus=True)
    if backend == "rocm":
        groups = ["video"]
        # The render nodes' group has no fixed name or id across distributions: pass its id.
        for node in sorted(Path("/dev/dri").glob("renderD*")):
            with contextlib.suppress(OSError):
                groups.append(str(node.stat().st_gid))
        return Devices(nodes=("/dev/kfd", "/dev/dri"), groups=tuple(dict.fromkeys(groups)))
    return Devices()


def device_options(backend: str | None) -> dict[str, Any]:
    """docker SDK create() options that give the container the backend's devices."""
    wanted = devices(backend)
    options: dict[str, Any] = {}
    if wanted.gpus:
        from docker.types import DeviceRequest

        options["device_requests"] = [DeviceRequest(count=-1, capabilities=[["gpu"]])]
    if wanted.nodes:
        options["devices"] = [f"{n}:{n}:rwm" for n in wanted.nodes]
    if wanted.groups:
        options["group_add"] = list(wanted.groups)
    return options


def device_flags(backend: str | None) -> list[str]:
    """The same devices as `docker run` flags."""
    wanted = devices(backend)
    flags = ["--gpus", "all"] if wanted.gpus else []
    for node in wanted.nodes:
        flags += ["--device", node]
    for group in wanted.groups:
        flags += ["--group-add", group]
    return flags
