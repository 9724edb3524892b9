"""Docker sides (`docker:IMAGE`): resolving the image, running each worker in a fresh container of
it (ContainerLauncher), and the `docker run` line that reproduces one cell by hand.

A container sees the host only through bind mounts at the same absolute paths, so every path in
a step's argv stays valid inside. One function, `mounts_for`, derives the mounts of every step
(worker, probe, rollback write/read, `torch-matrix run` of a repro line) from its argv: what the
step writes is mounted read-write (the run directory above `--result`, the folders of `--out`,
`--trace`, `--report`, the checkpoint folder of `--into`), what it only reads read-only (plugin
files named in `--spec` or `--workload` with their folders, `--matrix`, `--policy`, `--from`).
A step whose argv names a host path that no mount covers is refused before its container starts,
so a new step cannot silently see nothing. Nothing else of the host is visible, the run's other
side included. A workload given as `module:object` must be importable inside the image.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import socket
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from suite.envinfo import ENV_PREFIXES, IMAGE_DIGEST_VAR, IMAGE_REF_VAR
from suite.errors import EnvironmentProblem, InputError
from suite.launch import TERM_GRACE_S, Outcome
from suite.secrets import without_secrets
from suite.side_record import Side
from suite.workloads import file_part

PREFIX = "docker:"
IMAGE_BASE_VAR = "TORCH_MATRIX_IMAGE_BASE"
LABEL_TORCH = "dev.torch-matrix.torch-version"
LABEL_BACKEND = "dev.torch-matrix.backend"
LABEL_BASE = "dev.torch-matrix.base"
WORKER_LABEL = "dev.torch-matrix.worker"  # lets `docker ps --filter label=...` find strays
# The uid the container runs as has no passwd entry in the image, hence no usable home; torch
# and triton write caches under $HOME.
CONTAINER_HOME = "/tmp"
# torch's multiprocessing and multi-rank cells use /dev/shm; Docker's 64 MiB default makes them
# fail in ways the host does not.
SHM_SIZE = "1g"
# How a step's argv names the host paths it touches: flag -> (access, levels above the value
# that the mount goes). `--result` is RUN/cells/CELL.json: the whole run directory is written
# (cells/, tensors/, the inductor cache). A flag given twice is mounted twice.
PATH_FLAGS: dict[str, tuple[str, int]] = {
    "--result": ("rw", 2),
    "--out": ("rw", 1),
    "--trace": ("rw", 1),
    "--report": ("rw", 1),
    "--into": ("rw", 0),
    "--from": ("ro", 0),
    "--matrix": ("ro", 0),
    "--policy": ("ro", 0),
}
# Flags whose value holds workload references (a JSON cell spec, or the reference itself).
REF_FLAGS = ("--spec", "--workload")
# Host folders that are never mounted whole, because the image has its own (HOME is /tmp inside)
# or because they hold far more than a plugin: a plugin file directly in one is mounted alone.
_WHOLE_FOLDER_NEVER = ("/", "/tmp", "/home", "/root", "/opt", "/usr", "/var", "/etc", "/srv")
# Allowlist: what the environment record keeps, plus locale and Python output settings. PATH,
# HOME, PYTHONPATH and VIRTUAL_ENV describe the host's layout and would break the image's.
_FORWARD_PREFIXES = (*ENV_PREFIXES, "PYTHONUNBUFFERED", "PYTHONHASHSEED", "LANG", "LC_", "TZ")
_HOST_ONLY = ("TORCH_MATRIX_CACHE", "TORCH_MATRIX_TEST_IMAGE")


def forwarded_env(env: Mapping[str, str]) -> dict[str, str]:
    """The variables that go into a container: allowlisted, never a secret or a redacted one."""
    allowed = {k: v for k, v in env.items() if k.startswith(_FORWARD_PREFIXES)}
    return without_secrets({k: v for k, v in allowed.items() if k not in _HOST_ONLY})


def image_env(reference: str | None, digest: str | None, base: str | None) -> dict[str, str]:
    pairs = ((IMAGE_REF_VAR, reference), (IMAGE_DIGEST_VAR, digest), (IMAGE_BASE_VAR, base))
    return {k: v for k, v in pairs if v}


def _refs(flag: str, value: str) -> list[str]:
    if flag == "--workload":
        return [value]
    try:
        spec = json.loads(value)
    except ValueError:
        return []
    return [spec["ref"]] if isinstance(spec, dict) and isinstance(spec.get("ref"), str) else []


def _plugin_mount(file: Path) -> str:
    """The folder of a plugin file (its siblings may be imported), or the file alone where the
    folder is one the container needs for itself or the user's home."""
    folder = file.parent
    never = {*_WHOLE_FOLDER_NEVER, str(Path.home())}
    return str(file) if str(folder) in never else str(folder)


def _flag_values(argv: Sequence[str]) -> list[tuple[str, str]]:
    """(flag, value) pairs, `--flag value` and `--flag=value` alike."""
    pairs = []
    for i, word in enumerate(argv):
        if word.startswith("--") and "=" in word:
            flag, value = word.split("=", 1)
            pairs.append((flag, value))
        elif i + 1 < len(argv):
            pairs.append((word, argv[i + 1]))
    return pairs


def mounts_for(
    argv: Sequence[str],
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    *,
    create: bool = False,
) -> dict[str, str]:
    """Every host path the step with this argv reads or writes: path -> "rw" | "ro", collapsed.

    Relative paths count from cwd (default: this process's). With create, the folders the step
    writes are made here first; else Docker would make them, owned by root.
    """
    base = Path(cwd) if cwd is not None else Path.cwd()
    modes: dict[str, str] = {}

    def add(path: str, mode: str) -> None:
        modes[path] = "rw" if "rw" in (mode, modes.get(path)) else mode

    for flag, value in _flag_values(argv):
        if flag in PATH_FLAGS:
            mode, levels = PATH_FLAGS[flag]
            path = base / value
            target = path.parents[levels - 1] if levels else path
            if mode == "rw" and create:
                target.mkdir(parents=True, exist_ok=True)
            add(str(target), mode)
        elif flag in REF_FLAGS:
            for ref in _refs(flag, value):
                file = file_part(ref)
                if file is not None:
                    add(_plugin_mount((base / file).absolute()), "ro")
    cache = (env or {}).get("TORCHINDUCTOR_CACHE_DIR")
    if cache:
        add(str((base / cache).absolute().parent), "rw")
    return collapse(modes)


def uncovered(argv: Sequence[str], mounts: Mapping[str, str], cwd: Path | None = None) -> list[str]:
    """Host paths the argv names (existing ones, as values of any flag) that no mount covers.

    `--path` is exempt: it only adds to the worker's sys.path, and an entry missing inside the
    image is skipped by Python.
    """
    base = Path(cwd) if cwd is not None else Path.cwd()
    roots = [Path(p) for p in mounts]
    missing = []
    for flag, value in _flag_values(argv):
        if flag == "--path" or not value.startswith("/"):
            continue
        candidates = [value]
        if flag in REF_FLAGS:
            candidates = [f for r in _refs(flag, value) if (f := file_part(r)) is not None]
        for candidate in candidates:
            path = (base / candidate).absolute()
            if path.exists() and not any(path.is_relative_to(r) for r in roots):
                missing.append(str(path))
    return missing


def collapse(mounts: Mapping[str, str]) -> dict[str, str]:
    """Mounts (path -> "rw" | "ro") less those a mount above already covers at the same access.

    A read-write folder inside a read-only one stays: Docker mounts the inner one over it.
    """
    norm: dict[str, str] = {}
    for path, mode in mounts.items():
        key = os.path.normpath(path)
        norm[key] = "rw" if "rw" in (mode, norm.get(key)) else mode
    return {
        p: mode
        for p, mode in sorted(norm.items())
        if not any(
            q != p and Path(p).is_relative_to(q) and (outer == "rw" or outer == mode)
            for q, outer in norm.items()
        )
    }


def exit_status(exit_code: int, oom_killed: bool) -> tuple[int, str | None]:
    """(returncode, signal name) as run_process reports them, from a container's exit code.

    docker-init (--init) exits with 128+N when the worker died of signal N, like a shell; a
    worker's own exit code above 128 cannot be told apart from that, and none uses one.
    """
    if oom_killed:
        return -signal.SIGKILL, signal.SIGKILL.name
    if 128 < exit_code < 128 + signal.NSIG:
        number = exit_code - 128
        try:
            return -number, signal.Signals(number).name
        except ValueError:
            return -number, f"signal {number}"
    return exit_code, None


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


def docker_client() -> Any:
    try:
        import docker
    except ImportError as exc:
        raise EnvironmentProblem("docker sides need the docker SDK: pip install docker") from exc
    try:
        client = docker.from_env()
        client.ping()
    except docker.errors.DockerException as exc:
        raise EnvironmentProblem(
            f"cannot reach the Docker daemon ({exc}); is dockerd running, and DOCKER_HOST right?"
        ) from exc
    return client


@dataclass(frozen=True)
class ContainerLauncher:
    """A Launcher (suite/launch.py) that runs the argv inside a fresh container of one image."""

    image: str  # what to run: the image id, so a retag cannot swap it mid-run
    reference: str | None = None
    digest: str | None = None
    base: str | None = None
    backend: str | None = None
    network: str = "none"
    extra_mounts: tuple[tuple[str, str], ...] = ()  # (host path, "rw" | "ro")
    client_factory: Callable[[], Any] = docker_client

    def __call__(
        self,
        argv: Sequence[str],
        *,
        log_path: Path,
        timeout_s: float,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
        memory_limit_bytes: int | None = None,
    ) -> Outcome:
        client = self.client_factory()
        log_path.parent.mkdir(parents=True, exist_ok=True)
        modes = {**mounts_for(argv, env, cwd, create=True), **dict(self.extra_mounts)}
        mounts = collapse(modes)
        missing = uncovered(argv, mounts, cwd)
        if missing:
            raise EnvironmentProblem(
                f"the container step {shlex.join(argv[:4])} ... names host paths that no mount "
                f"covers: {', '.join(missing)}"
            )
        volumes = {p: {"bind": p, "mode": m} for p, m in mounts.items()}
        options: dict[str, Any] = {
            "entrypoint": [argv[0]],
            "command": list(argv[1:]),
            "environment": {
                **forwarded_env(env or {}),
                "HOME": CONTAINER_HOME,
                **image_env(self.reference, self.digest, self.base),
            },
            "volumes": volumes,
            "network_mode": self.network,
            # The environment record's hostname names the machine, not a random container id.
            "hostname": socket.gethostname(),
            # The host's ids, so that what the worker writes into the mounts is the caller's.
            "user": f"{os.getuid()}:{os.getgid()}",
            # docker-init as PID 1: the kernel ignores default-action signals sent to a
            # namespace's init, so without it a worker's SIGSEGV or SIGTERM would be lost.
            "init": True,
            "shm_size": SHM_SIZE,
            "labels": {WORKER_LABEL: "1"},
            **device_options(self.backend),
        }
        # The host's working directory, so that relative paths mean what they meant there;
        # Docker creates it inside when no mount covers it.
        options["working_dir"] = str(Path(cwd if cwd is not None else Path.cwd()).absolute())
        if memory_limit_bytes is not None:
            options.update(mem_limit=memory_limit_bytes, memswap_limit=memory_limit_bytes)
        start = time.perf_counter()
        container = client.containers.create(self.image, **options)
        try:
            container.start()
            timed_out = False
            try:
                exit_code = int(container.wait(timeout=timeout_s)["StatusCode"])
            except Exception as exc:  # the SDK raises requests' or urllib3's timeout, by version
                if time.perf_counter() - start < timeout_s * 0.99:
                    raise EnvironmentProblem(
                        f"waiting for container {container.id}: {exc}"
                    ) from exc
                timed_out, exit_code = True, -1
                with contextlib.suppress(Exception):
                    container.stop(timeout=int(TERM_GRACE_S))  # SIGTERM, then SIGKILL
            wall = time.perf_counter() - start
            with open(log_path, "wb") as log:
                for chunk in container.logs(stdout=True, stderr=True, stream=True):
                    log.write(chunk)
            container.reload()
            oom = bool(container.attrs.get("State", {}).get("OOMKilled"))
        finally:
            with contextlib.suppress(Exception):
                container.remove(force=True)
        if timed_out:
            return Outcome(None, None, True, wall, None)
        code, sig = exit_status(exit_code, oom)
        # A cgroup OOM kill leaves no rusage; the peak was at the limit, which is what the
        # runner reads as an out-of-memory SIGKILL.
        maxrss = memory_limit_bytes if oom else None
        return Outcome(code, sig, False, wall, maxrss)


def _pick_digest(repo_digests: Sequence[str], reference: str) -> str | None:
    repo = reference.split("@", 1)[0]
    repo = repo.rsplit(":", 1)[0] if ":" in repo.rsplit("/", 1)[-1] else repo
    for digest in repo_digests:
        if digest.split("@", 1)[0] in (repo, f"docker.io/{repo}", f"docker.io/library/{repo}"):
            return digest
    return repo_digests[0] if repo_digests else None


def prepare_docker(spec: str, role: str) -> Side:
    """A side that runs its workers in containers of a local image (pulled only when absent)."""
    reference = spec.removeprefix(PREFIX).strip()
    if not reference:
        raise InputError(
            "docker: needs an image, e.g. docker:torch-matrix/cpu:torch-2.13.0", option=f"--{role}"
        )
    import docker

    client = docker_client()
    start = time.perf_counter()
    try:
        image = client.images.get(reference)
    except docker.errors.ImageNotFound:
        try:
            image = client.images.pull(reference)
        except docker.errors.DockerException as exc:
            raise EnvironmentProblem(
                f"image {reference!r} is not on this machine and could not be pulled ({exc}); "
                "build it (images/README.md) or docker pull it, then run again"
            ) from exc
    except docker.errors.DockerException as exc:
        raise EnvironmentProblem(f"cannot inspect image {reference!r}: {exc}") from exc
    labels: dict[str, str] = image.labels or {}
    repo_digest = _pick_digest(image.attrs.get("RepoDigests") or [], reference)
    # An image built here and never pushed has no registry digest; its id is a content digest
    # too (of its config), valid on this machine and on any that loads the same image.
    digest, kind = (repo_digest, "repo-digest") if repo_digest else (image.id, "image-id")
    torch = labels.get(LABEL_TORCH)
    backend = labels.get(LABEL_BACKEND)
    base = labels.get(LABEL_BASE)
    return Side(
        spec=spec,
        label=f"docker:{reference} (torch {torch or 'unknown'})",
        interpreter="python",  # the image's, first on its PATH
        prepared_s=time.perf_counter() - start,
        kind="docker",
        launcher=ContainerLauncher(
            image=image.id, reference=reference, digest=digest, base=base, backend=backend
        ),
        image={
            "reference": reference,
            "digest": digest,
            "digest_kind": kind,
            "id": image.id,
            "base": base,
            "backend": backend,
            "torch": torch,
        },
    )


def docker_run_line(
    image: str,
    backend: str | None,
    argv: Sequence[str],
    env: Mapping[str, str],
    extra_mounts: Mapping[str, str] | None = None,
) -> str:
    """The shell line that runs argv (a torch-matrix command) in the image: `mkdir -p` of the
    folders it writes (else Docker makes them, owned by root), then `docker run`.

    The mounts are mounts_for(argv), as for every container the suite starts, plus extra_mounts
    (host path -> "rw" | "ro"), each at the same path. The user is spelled
    `"$(id -u):$(id -g)"`, left for the shell that the line is pasted into.
    """
    args = list(argv[1:] if argv and argv[0] == "torch-matrix" else argv)
    mounts = collapse({**mounts_for(argv, env), **dict(extra_mounts or {})})
    head = ["docker", "run", "--rm", "--init", "--network", "none", "--shm-size", SHM_SIZE]
    head += device_flags(backend)
    for path, mode in mounts.items():
        head += ["-v", f"{path}:{path}" + (":ro" if mode == "ro" else "")]
    for key, value in {**forwarded_env(env), "HOME": CONTAINER_HOME}.items():
        head += ["-e", f"{key}={value}"]
    written = [p for p, mode in mounts.items() if mode == "rw"]
    mkdir = f"{shlex.join(['mkdir', '-p', *written])} && " if written else ""
    return f'{mkdir}{shlex.join(head)} --user "$(id -u):$(id -g)" {shlex.join([image, *args])}'
