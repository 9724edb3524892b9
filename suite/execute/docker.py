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

from suite.core.errors import EnvironmentProblem, InputError
from suite.core.host import ENV_PREFIXES, IMAGE_DIGEST_VAR, IMAGE_REF_VAR
from suite.core.records import DigestKind
from suite.core.secrets import withheld, without_secrets
from suite.execute import shell
from suite.execute.devices import device_flags, device_options
from suite.execute.launch import TERM_GRACE_S, ProcessExit, Step
from suite.execute.mounts import collapse, mounts_for, uncovered
from suite.execute.prepared import PreparedSide

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
# Allowlist: what the environment record keeps, plus locale and Python output settings. PATH,
# HOME, PYTHONPATH and VIRTUAL_ENV describe the host's layout and would break the image's.
_FORWARD_PREFIXES = (*ENV_PREFIXES, "PYTHONUNBUFFERED", "PYTHONHASHSEED", "LANG", "LC_", "TZ")
_HOST_ONLY = ("TORCH_MATRIX_CACHE", "TORCH_MATRIX_TEST_")  # prefixes


def _allowed(env: Mapping[str, str]) -> dict[str, str]:
    return {
        k: v
        for k, v in env.items()
        if k.startswith(_FORWARD_PREFIXES) and not k.startswith(_HOST_ONLY)
    }


def forwarded_env(env: Mapping[str, str]) -> dict[str, str]:
    """The variables that go into a container: allowlisted, never a secret (by name or value)
    or a redacted one."""
    return without_secrets(_allowed(env))


def withheld_names(env: Mapping[str, str]) -> list[str]:
    """Allowlisted variables that a pasted line passes by name only (`-e NAME`): secret by name
    or value, or recorded redacted; the pasting shell supplies its own value, if any."""
    return sorted(k for k, v in _allowed(env).items() if withheld(k, v))


def image_env(reference: str | None, digest: str | None, base: str | None) -> dict[str, str]:
    pairs = ((IMAGE_REF_VAR, reference), (IMAGE_DIGEST_VAR, digest), (IMAGE_BASE_VAR, base))
    return {k: v for k, v in pairs if v}


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
    """A Launcher (suite/execute/launch.py) that runs the argv inside a fresh container of one
    image."""

    image: str  # what to run: the image id, so a retag cannot swap it mid-run
    reference: str | None = None
    digest: str | None = None
    base: str | None = None
    backend: str | None = None
    network: str = "none"
    extra_mounts: tuple[tuple[str, str], ...] = ()  # (host path, "rw" | "ro")
    client_factory: Callable[[], Any] = docker_client

    def __call__(self, step: Step) -> ProcessExit:
        client = self.client_factory()
        step.log_path.parent.mkdir(parents=True, exist_ok=True)
        argv, cwd = step.argv, step.cwd
        modes = {**mounts_for(argv, step.env, cwd, create=True), **dict(self.extra_mounts)}
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
                **forwarded_env(step.env or {}),
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
        if step.memory_limit_bytes is not None:
            options.update(mem_limit=step.memory_limit_bytes, memswap_limit=step.memory_limit_bytes)
        start = time.perf_counter()
        container = client.containers.create(self.image, **options)
        try:
            container.start()
            timed_out = False
            try:
                exit_code = int(container.wait(timeout=step.timeout_s)["StatusCode"])
            except Exception as exc:  # the SDK raises requests' or urllib3's timeout, by version
                if time.perf_counter() - start < step.timeout_s * 0.99:
                    raise EnvironmentProblem(
                        f"waiting for container {container.id}: {exc}"
                    ) from exc
                timed_out, exit_code = True, -1
                with contextlib.suppress(Exception):
                    container.stop(timeout=int(TERM_GRACE_S))  # SIGTERM, then SIGKILL
            wall = time.perf_counter() - start
            with open(step.log_path, "wb") as log:
                for chunk in container.logs(stdout=True, stderr=True, stream=True):
                    log.write(chunk)
            container.reload()
            oom = bool(container.attrs.get("State", {}).get("OOMKilled"))
        finally:
            with contextlib.suppress(Exception):
                container.remove(force=True)
        if timed_out:
            return ProcessExit(None, None, True, wall, None)
        code, sig = exit_status(exit_code, oom)
        # A cgroup OOM kill leaves no rusage; the peak was at the limit, which is what the
        # runner reads as an out-of-memory SIGKILL.
        maxrss = step.memory_limit_bytes if oom else None
        return ProcessExit(code, sig, False, wall, maxrss)


def _pick_digest(repo_digests: Sequence[str], reference: str) -> str | None:
    repo = reference.split("@", 1)[0]
    repo = repo.rsplit(":", 1)[0] if ":" in repo.rsplit("/", 1)[-1] else repo
    for digest in repo_digests:
        if digest.split("@", 1)[0] in (repo, f"docker.io/{repo}", f"docker.io/library/{repo}"):
            return digest
    return repo_digests[0] if repo_digests else None


def _find_image(client: Any, reference: str) -> Any:
    """The local image a reference names; pulled only when absent. NAME@sha256:ID pins a local
    image that was never pushed by its id: then NAME must be that image here."""
    import docker

    try:
        return client.images.get(reference)
    except docker.errors.ImageNotFound:
        pass
    except docker.errors.DockerException as exc:
        raise EnvironmentProblem(f"cannot inspect image {reference!r}: {exc}") from exc
    name, _, digest = reference.partition("@")
    if digest.startswith("sha256:"):
        try:
            local = client.images.get(name) if ":" in name.rsplit("/", 1)[-1] else None
            local = local or client.images.get(digest)
        except docker.errors.DockerException:
            local = None
        if local is not None and local.id == digest:
            return local
    try:
        return client.images.pull(reference)
    except docker.errors.DockerException as exc:
        raise EnvironmentProblem(
            f"image {reference!r} is not on this machine and could not be pulled ({exc}); "
            "build it (torch-matrix image build, images/README.md) or docker pull it, then run "
            "again"
        ) from exc


def check_suite(labels: Mapping[str, str], reference: str) -> str:
    """The image's suite digest; EnvironmentProblem when it is not the suite running here, whose
    command lines would drive another suite's worker."""
    from suite.execute.images import LABEL_SUITE, suite_digest

    ours = suite_digest()
    theirs = labels.get(LABEL_SUITE)
    if theirs != ours:
        what = f"suite {theirs[:19]}…" if theirs else "a suite of unknown version (no label)"
        raise EnvironmentProblem(
            f"image {reference} holds {what}, not this torch-matrix ({ours[:19]}…): its worker "
            "would not be the one these results claim; rebuild it with `torch-matrix image build "
            "--backend BACKEND --torch VERSION` from this checkout"
        )
    return theirs


def prepare_docker(spec: str, role: str) -> PreparedSide:
    """A side that runs its workers in containers of a local image (pulled only when absent)."""
    from suite.execute.images import LABEL_BASE_DIGEST, LABEL_RECIPE

    reference = spec.removeprefix(PREFIX).strip()
    if not reference:
        raise InputError(
            "docker: needs an image, e.g. docker:torch-matrix/cpu:torch-2.13.0", option=f"--{role}"
        )
    client = docker_client()
    start = time.perf_counter()
    image = _find_image(client, reference)
    labels: dict[str, str] = image.labels or {}
    suite = check_suite(labels, reference)
    repo_digest = _pick_digest(image.attrs.get("RepoDigests") or [], reference)
    # An image built here and never pushed has no registry digest; its id is a content digest
    # too (of its config), valid on this machine and on any that loads the same image.
    kind: DigestKind = "repo-digest" if repo_digest else "image-id"
    digest = repo_digest or image.id
    torch = labels.get(LABEL_TORCH)
    backend = labels.get(LABEL_BACKEND)
    base = labels.get(LABEL_BASE)
    try:
        recipe = json.loads(labels.get(LABEL_RECIPE) or "null")
    except ValueError:
        recipe = None
    tags = [t for t in (image.tags or []) if not t.endswith(":latest")]
    return PreparedSide(
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
            "tag": tags[0] if tags else None,
            "base": base,
            "base_digest": labels.get(LABEL_BASE_DIGEST) or None,
            "backend": backend,
            "torch": torch,
            "suite": suite,
            "revision": labels.get("org.opencontainers.image.revision"),
            "source": labels.get("org.opencontainers.image.source"),
            "recipe": recipe if isinstance(recipe, dict) else None,
        },
    )


def docker_run_line(
    image: str,
    backend: str | None,
    argv: Sequence[str],
    env: Mapping[str, str],
    extra_mounts: Mapping[str, str] | None = None,
    variables: Mapping[str, str] | None = None,
) -> str:
    """The shell line that runs argv (a torch-matrix command) in the image: `mkdir -p` of the
    folders it writes (else Docker makes them, owned by root), then `docker run`. image may be
    a placeholder of variables (suite.execute.shell.variable).

    The mounts are mounts_for(argv), as for every container the suite starts, plus extra_mounts
    (host path -> "rw" | "ro"), each at the same path. argv may hold the placeholders of
    suite.execute.shell (the pasting folder, the time); the user is the pasting user's ids.
    """
    args = list(argv[1:] if argv and argv[0] == "torch-matrix" else argv)
    mounts = collapse({**mounts_for(argv, env), **dict(extra_mounts or {})})
    head = ["docker", "run", "--rm", "--init", "--network", "none", "--shm-size", SHM_SIZE]
    head += device_flags(backend)
    for path, mode in mounts.items():
        head += ["-v", f"{path}:{path}" + (":ro" if mode == "ro" else "")]
    for key, value in {**forwarded_env(env), "HOME": CONTAINER_HOME}.items():
        head += ["-e", f"{key}={value}"]
    for key in withheld_names(env):
        head += ["-e", key]  # by name: the value is the pasting shell's, never written here
    head += ["--user", shell.USER, image, *args]
    written = [p for p, mode in mounts.items() if mode == "rw"]
    mkdir = f"{shell.join(['mkdir', '-p', *written])} && " if written else ""
    return mkdir + shell.join(head, variables)
