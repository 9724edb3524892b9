"""The backends, registered once: everything the suite says or does per backend is read from
its entry here, so that adding a backend is one `register_backend` call (below, or in a
plugin), its worker class and its image folder.

Read from here: the CLI's `--backend` choices, the schemas' backend enums (filled in when a
schema is loaded; tests/test_registries.py holds the files' lists equal to the built-in
entries), the matrix's default backends, the planner's runner labels, the container's devices,
the image builder's Dockerfile, the distributed backend's name and the README's backend table.
The worker's side (probe, synchronize, peak memory) is the class `runtime` names, imported
only in the worker, so that nothing here imports torch.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "BackendEntry",
    "DeviceAccess",
    "backend_entry",
    "backend_names",
    "image_backends",
    "register_backend",
    "unregister_backend",
]


@dataclass(frozen=True)
class DeviceAccess:
    """What a backend's container needs of the host's devices."""

    gpus: bool = False  # NVIDIA Container Toolkit: every GPU (`--gpus all`)
    nodes: tuple[str, ...] = ()  # device nodes passed through (`--device`)
    groups: tuple[str, ...] = ()  # supplementary groups that may open them (`--group-add`)
    # Device nodes (globs) whose owning group id is added too: a render node's group has no
    # fixed name or id across distributions.
    node_groups: tuple[str, ...] = ()


@dataclass(frozen=True)
class BackendEntry:
    name: str
    runtime: str  # "module:Class" of the worker's Backend: probe, sync, memory tracker
    image: str | None  # the folder holding its Dockerfile; None: it runs natively only
    # Labels of its CI runners. Planned by default only where `planned_by_default`: a job on
    # labels no runner has waits a day, so the other backends' labels are a hint to name them.
    runner_labels: tuple[str, ...]
    planned_by_default: bool = False
    devices: DeviceAccess = DeviceAccess()
    # The host's own work: its cells run under an address-space limit (a GPU driver's large
    # reservations break under one) and their instructions can be counted under callgrind.
    host: bool = False
    # Ops without a kernel may run on the CPU instead (PYTORCH_ENABLE_MPS_FALLBACK): each cell
    # records whether one did, and the fallback gate reads it.
    falls_back: bool = False
    process_group: str = "gloo"  # torch.distributed's backend for its ranks (HIP's is "nccl")
    comms: str = "gloo"  # torchcomms' name for it
    # For the README's table: when it is available, how peak memory is read, what synchronizes,
    # and what its CI runner needs.
    detected: str = ""
    memory: str = ""
    sync: str = ""
    runner_needs: str = ""
    state: str = "**untested on hardware**"  # until a CI job runs it end to end

    @property
    def dockerfile(self) -> str | None:
        return f"{self.image}/Dockerfile" if self.image else None


_ENTRIES: dict[str, BackendEntry] = {}


def register_backend(entry: BackendEntry) -> None:
    if entry.name in _ENTRIES:
        raise ValueError(f"backend {entry.name!r} is registered already")
    if not entry.name.isidentifier() or not entry.name.islower():
        raise ValueError(f"backend name {entry.name!r}: lower-case letters, digits and _ only")
    _ENTRIES[entry.name] = entry


def unregister_backend(name: str) -> None:
    del _ENTRIES[name]


def backend_names() -> tuple[str, ...]:
    return tuple(_ENTRIES)


def image_backends() -> tuple[str, ...]:
    """The backends that run in a container built from their image folder."""
    return tuple(name for name, entry in _ENTRIES.items() if entry.image)


def backend_entry(name: str) -> BackendEntry:
    """The entry of a registered backend; KeyError (naming the known ones) otherwise."""
    try:
        return _ENTRIES[name]
    except KeyError:
        raise KeyError(f"unknown backend {name!r}; expected one of {', '.join(_ENTRIES)}") from None


_RUNTIME = "suite.worker.backends"
_DOCKER_NEEDS = (
    "Docker with BuildKit (Docker 23+, or 20.10 with `DOCKER_BUILDKIT=1`), network to the "
    "pins' indexes or a `wheel-dir`"
)

register_backend(
    BackendEntry(
        name="cpu",
        runtime=f"{_RUNTIME}:CpuBackend",
        image="images/cpu",
        runner_labels=("self-hosted", "linux", "x64"),
        planned_by_default=True,
        host=True,
        detected="always",
        memory="the allocator's live-tensor peak (profiler events), RSS beside it",
        sync="—",
        runner_needs=_DOCKER_NEEDS,
        state="built and run in CI, offline, end to end through the workflow",
    )
)
register_backend(
    BackendEntry(
        name="cuda",
        runtime=f"{_RUNTIME}:CudaBackend",
        image="images/cuda",
        runner_labels=("self-hosted", "linux", "cuda"),
        devices=DeviceAccess(gpus=True),
        process_group="nccl",
        comms="nccl",
        detected="a CUDA build of torch and `torch.cuda.is_available()`",
        memory="`torch.cuda.max_memory_allocated`",
        sync="`torch.cuda.synchronize`",
        runner_needs="that, plus the NVIDIA driver and the NVIDIA Container Toolkit "
        "(`docker run --gpus all`)",
    )
)
register_backend(
    BackendEntry(
        name="rocm",
        runtime=f"{_RUNTIME}:RocmBackend",
        image="images/rocm",
        runner_labels=("self-hosted", "linux", "rocm"),
        devices=DeviceAccess(
            nodes=("/dev/kfd", "/dev/dri"), groups=("video",), node_groups=("/dev/dri/renderD*",)
        ),
        process_group="nccl",  # RCCL, under the name HIP builds of torch give it
        comms="rccl",
        detected="a HIP build of torch and a visible AMD GPU",
        memory="same API as CUDA",
        sync="same",
        runner_needs="that, plus the amdgpu driver, `/dev/kfd` and `/dev/dri` (passed with "
        "`--device`, and the `video` and render groups)",
    )
)
register_backend(
    BackendEntry(
        name="mps",
        runtime=f"{_RUNTIME}:MpsBackend",
        image=None,  # no container has Metal
        runner_labels=("self-hosted", "macOS", "ARM64"),
        falls_back=True,
        detected="`torch.backends.mps.is_available()` and a kernel that computes",
        memory="`torch.mps.driver_allocated_memory`, sampled",
        sync="`torch.mps.synchronize`",
        runner_needs="an Apple Silicon Mac with Python ≥ 3.10; no Docker (no container has "
        "Metal): venv sides always",
    )
)
