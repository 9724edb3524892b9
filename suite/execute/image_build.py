"""Building one pin's image: the build context checked to be this very suite, the wheel folder
brought inside it, `docker build` with the recipe's arguments (a credential only as the
BuildKit secret pip-index), an optional push, and the smoke test (torch.compile, AOTInductor,
a Triton kernel where a GPU is present). What an image is, its recipe, key, tag, base and
rebuild line, is suite/execute/images.py."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from suite.core.errors import EnvironmentProblem, InputError
from suite.core.secrets import redact_text
from suite.execute.bases import check_built_on, resolve_base
from suite.execute.cache import cache_root
from suite.execute.devices import device_flags
from suite.execute.images import (
    BUILD_TIMEOUT_S,
    DEFAULT_REPOSITORY,
    INSPECT_TIMEOUT_S,
    PUSH_TIMEOUT_S,
    SMOKE_TIMEOUT_S,
    WHEEL_LINKS,
    Built,
    Recipe,
    build_cli,
    default_base,
    image_tag,
    inspect_image,
    recipe_key,
    suite_digest,
    wheel_listing,
)


def _git_revision(context: Path) -> str | None:
    proc = subprocess.run(
        ["git", "-C", str(context), "rev-parse", "HEAD"],
        capture_output=True,
        text=True,
        timeout=INSPECT_TIMEOUT_S,
        check=False,
    )
    return proc.stdout.strip() if proc.returncode == 0 else None


@contextlib.contextmanager
def _wheels_in_context(context: Path, wheel_dir: Path | None) -> Iterator[str | None]:
    """The wheel folder as a path inside the build context: as given when it is inside, else
    hard-linked (copied across filesystems) into a folder that is removed after the build."""
    if wheel_dir is None:
        yield None
        return
    folder = wheel_dir.resolve()
    if folder.is_relative_to(context):
        yield folder.relative_to(context).as_posix()
        return
    link = context / WHEEL_LINKS / hashlib.sha256(str(folder).encode()).hexdigest()[:12]
    shutil.rmtree(link, ignore_errors=True)
    link.mkdir(parents=True)
    try:
        for wheel in folder.glob("*.whl"):
            try:
                os.link(wheel, link / wheel.name)
            except OSError:
                shutil.copy2(wheel, link / wheel.name)
        yield link.relative_to(context).as_posix()
    finally:
        shutil.rmtree(link, ignore_errors=True)


@dataclass
class BuildOptions:
    context: Path
    log: Path
    registry: str | None = None  # push there and run by its digest
    network: str | None = None  # docker build --network (host: an index on loopback)
    smoke: bool = True
    ca_file: Path | None = None
    source_url: str | None = None
    pull: bool = True
    extra_env: dict[str, str] = field(default_factory=dict)


def _checked_context(context: Path, recipe: Recipe) -> str:
    """The suite's digest, once the build context is a checkout of this very suite."""
    if not (context / recipe.dockerfile).is_file():
        raise InputError(
            f"no {recipe.dockerfile} here: the build context must be a checkout of torch-matrix",
            file=str(context),
            option="--context",
        )
    suite = suite_digest()
    theirs = suite_digest(context / "suite")
    if theirs != suite:
        raise InputError(
            f"the build context holds another suite ({theirs[:19]}) than the one running "
            f"({suite[:19]}): the image would not follow the suite that drives it; build from "
            "the checkout this torch-matrix was installed from",
            file=str(context),
            option="--context",
        )
    return suite


def _build_argv(
    pinned: Recipe,
    options: BuildOptions,
    labels: Mapping[str, str],
    wheel_rel: str | None,
    tmp: Path,
) -> list[str]:
    """`docker build` of the recipe: its arguments and labels, the index credentials and CA as
    build secrets (never a layer), and no network at all when building from wheels."""
    context = options.context.resolve()
    argv = [*build_cli(), "build", "--progress=plain"]
    argv += ["-f", str(context / pinned.dockerfile)]
    for name, value in {**pinned.build_args(wheel_rel), **labels}.items():
        argv += ["--build-arg", f"{name}={value}"]
    if pinned.indexes.needs_secret():
        secret = tmp / "pip-index"
        secret.write_text(pinned.secret_lines(), encoding="utf-8")
        secret.chmod(0o600)
        argv += ["--secret", f"id=pip-index,src={secret}"]
    if options.ca_file is not None:
        argv += ["--secret", f"id=ca,src={options.ca_file}"]
    network = options.network or (
        "none" if pinned.wheel_dir else "host" if _loopback(pinned) else None
    )
    if network:
        argv += ["--network", network]
    return argv


def build_image(recipe: Recipe, options: BuildOptions) -> Built:
    """Build (or find in the layer cache), label, optionally push, and smoke-test the image."""
    import time

    start = time.perf_counter()
    context = options.context.resolve()
    suite = _checked_context(context, recipe)
    base = resolve_base(recipe.base or default_base(context, recipe.backend), pull=options.pull)
    pinned = replace(recipe, base=base.reference)
    wheel_dir = Path(recipe.wheel_dir) if recipe.wheel_dir else None
    wheels = wheel_listing(wheel_dir) if wheel_dir else None
    dockerfile = (context / recipe.dockerfile).read_text("utf-8")
    key = recipe_key(pinned, suite, base.digest, wheels, dockerfile)
    tag = image_tag(recipe, key, options.registry or DEFAULT_REPOSITORY)
    revision = _git_revision(context)
    labels = {
        "REVISION": revision or "unknown",
        "SOURCE_URL": options.source_url or "unknown",
        "SUITE_DIGEST": suite,
        "BASE_DIGEST": base.digest,
        "RECIPE": json.dumps(pinned.public(), sort_keys=True, separators=(",", ":")),
    }
    options.log.parent.mkdir(parents=True, exist_ok=True)
    with (
        tempfile.TemporaryDirectory(prefix="torch-matrix-build-") as tmp,
        _wheels_in_context(context, wheel_dir) as wheel_rel,
    ):
        argv = _build_argv(pinned, options, labels, wheel_rel, Path(tmp))
        iid = Path(tmp) / "iid"
        argv += ["--iidfile", str(iid), "-t", tag, str(context)]
        _run_logged(argv, options.log, BUILD_TIMEOUT_S, {"DOCKER_BUILDKIT": "1"})
        image_id = iid.read_text("utf-8").strip()
    check_built_on(image_id, tag, base)
    return Built(
        tag=tag,
        id=image_id,
        repo_digest=_push(tag, options.log) if options.registry else None,
        recipe=pinned,
        base=base,
        suite=suite,
        key=key,
        revision=revision,
        source=options.source_url,
        took_s=time.perf_counter() - start,
        smoke=_smoke(tag, recipe.backend, options.log) if options.smoke else None,
        log=str(options.log),
    )


def _loopback(recipe: Recipe) -> bool:
    urls = recipe.indexes.expanded().urls()
    return any(re.search(r"://([^/@]*@)?(localhost|127\.[0-9.]+|\[::1\])[:/]", u) for u in urls)


def _run_logged(argv: Sequence[str], log: Path, timeout: float, env: Mapping[str, str]) -> None:
    """Run a docker command into the log, masked; EnvironmentProblem with its tail on failure."""
    shown = redact_text(shlex.join(argv))
    with open(log, "a", encoding="utf-8") as fh:
        fh.write(f"$ {shown}\n")
        fh.flush()
        try:
            proc = subprocess.Popen(
                argv,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                env={**os.environ, **env},
                errors="replace",
            )
        except FileNotFoundError:
            raise EnvironmentProblem(f"{argv[0]} is not installed") from None
        assert proc.stdout is not None
        tail: list[str] = []
        try:
            for line in proc.stdout:
                masked = redact_text(line)
                fh.write(masked)
                tail = [*tail[-39:], masked]
            code = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise EnvironmentProblem(f"{argv[1]} ran past {timeout:.0f}s; log: {log}") from None
    if code != 0:
        raise EnvironmentProblem(
            f"docker {argv[1]} exited {code}; log: {log}\n" + "".join(tail).rstrip()
        )


def _push(tag: str, log: Path) -> str:
    _run_logged([*build_cli(), "push", tag], log, PUSH_TIMEOUT_S, {})
    doc = inspect_image(tag) or {}
    repo = tag.rsplit(":", 1)[0]
    for digest in doc.get("RepoDigests") or []:
        if digest.split("@", 1)[0] == repo:
            return str(digest)
    raise EnvironmentProblem(f"pushed {tag} but docker reports no repo digest for {repo}")


def _smoke(tag: str, backend: str, log: Path) -> dict[str, Any]:
    """python -m suite.worker.smoke in the image, offline, with the backend's devices; once per
    set of layers on this machine: an image whose layers all came from the cache (the same
    content under other labels) passed it already."""
    gpu = backend != "cpu" and any(Path(p).exists() for p in ("/dev/nvidia0", "/dev/kfd"))
    layers = ((inspect_image(tag) or {}).get("RootFS") or {}).get("Layers") or [tag]
    content = hashlib.sha256("\n".join(layers).encode()).hexdigest()
    passed = cache_root() / "smoke" / f"{content}{'-gpu' if gpu else ''}.json"
    if passed.is_file():
        with contextlib.suppress(ValueError, OSError):
            earlier: dict[str, Any] = json.loads(passed.read_text("utf-8"))
            with open(log, "a", encoding="utf-8") as fh:
                fh.write(f"smoke test of {tag}: passed before ({passed})\n")
            return {**earlier, "cached": True}
    argv = [*build_cli(), "run", "--rm", "--network", "none"]
    argv += device_flags(backend) if gpu else []
    argv += ["--entrypoint", "python", tag, "-m", "suite.worker.smoke"]
    with open(log, "a", encoding="utf-8") as fh:
        fh.write(f"$ {shlex.join(argv)}\n")
    try:
        proc = subprocess.run(
            argv, capture_output=True, text=True, timeout=SMOKE_TIMEOUT_S, check=False
        )
    except subprocess.TimeoutExpired:
        raise EnvironmentProblem(
            f"the smoke test of {tag} ran past {SMOKE_TIMEOUT_S:.0f}s"
        ) from None
    with open(log, "a", encoding="utf-8") as fh:
        fh.write(redact_text(proc.stdout + proc.stderr))
    lines = proc.stdout.strip().splitlines()
    try:
        result: dict[str, Any] = json.loads(lines[-1]) if lines else {}
    except ValueError:
        result = {}
    failed = {k: v for k, v in (result.get("checks") or {}).items() if not v.get("ok")}
    if proc.returncode != 0 or failed or not result:
        why = "; ".join(f"{k}: {v.get('detail')}" for k, v in failed.items())
        raise EnvironmentProblem(
            f"{tag} cannot run every cell the matrix asks (smoke test exited {proc.returncode}"
            f"{': ' + why if why else ''}); log: {log}\n{redact_text(proc.stderr)[-1500:]}"
        )
    passed.parent.mkdir(parents=True, exist_ok=True)
    passed.write_text(json.dumps(result), encoding="utf-8")
    return result
