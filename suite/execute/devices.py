"""The devices a container gets for a backend (its registry entry's), one builder for both the
Docker SDK's options and the flags of a pasted docker run line."""

from __future__ import annotations

import contextlib
import glob
from dataclasses import replace
from pathlib import Path
from typing import Any

from suite.core.backends import DeviceAccess, backend_entry


def devices(backend: str | None) -> DeviceAccess:
    """What the backend's container needs (its registry entry), with the owning groups of its
    device nodes found on this host; the SDK options and the `docker run` flags both come from
    this, so the two cannot drift apart."""
    if backend is None:
        return DeviceAccess()
    wanted = backend_entry(backend).devices
    groups = list(wanted.groups)
    for pattern in wanted.node_groups:
        for node in sorted(glob.glob(pattern)):
            with contextlib.suppress(OSError):
                groups.append(str(Path(node).stat().st_gid))
    return replace(wanted, groups=tuple(dict.fromkeys(groups)), node_groups=())


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
