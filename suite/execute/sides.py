"""Sides of an A/B comparison: a pip requirement for torch (a cached virtual environment is
made for it), or a path to an interpreter that already has torch."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from suite.core.errors import EnvironmentProblem, InputError, warn
from suite.core.secrets import redact_text, without_credential
from suite.execute.cache import cache_root
from suite.execute.guarded import own_pip, pip_install
from suite.execute.holding import hold
from suite.execute.indexes import Indexes
from suite.execute.manifest import (
    SHOWN,
    differences,
    manifest_path,
    read_manifest,
    write_manifest,
)
from suite.execute.pinned import BaselinePins, read_pins, read_record, write_record
from suite.execute.prepared import PreparedSide
from suite.execute.side_deps import WORKER_NEEDS, check_interpreter, parse_requirement

_REQUIREMENT = re.compile(r"^torch\s*(\[[^\]]*\])?\s*(==|~=|>=|<=|>|<|!=|===|@)")
# Runtime needs of the worker besides torch; the suite itself travels on PYTHONPATH.
WORKER_REQUIREMENTS = tuple(WORKER_NEEDS.values())
INSTALL_TIMEOUT_S = 3600.0
# Every venv install: wheels only. Not in the venv's key: a venv built before is what it was,
# and is checked against its manifest before each reuse as any other.
WHEELS_ONLY = ("--only-binary", ":all:")
READY = ".torch-matrix-ready"  # inside a venv whose build finished: the requirement, masked


def parse(spec: str, role: str) -> str:
    """Classify a side spec (its kind's name); raise InputError naming the option when it is
    none of the kinds."""
    return _kind(spec, role).name


def _kind(spec: str, role: str) -> SideKind:
    for kind in KINDS:
        if kind.matches(spec):
            return kind
    raise InputError(
        f"{spec!r} is neither a torch requirement (torch==2.14.1) nor a path to a Python "
        "interpreter",
        option=f"--{role}",
    )


def _venv_python(venv: Path) -> Path:
    return venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def venv_path(
    requirement: str,
    python: str,
    indexes: Indexes,
    with_requirements: Sequence[str] = (),
    pins: BaselinePins | None = None,
) -> Path:
    """Where the venv of a requirement lives: named by the requirement (masked) and a key of
    everything that decides its contents, the indexes, the extra requirements (a set: their
    order is not) without their credentials among them, and the baseline's pins it holds."""
    extra = sorted({without_credential(r) for r in with_requirements})
    key_src = json.dumps(
        [
            without_credential(requirement),
            sys.version_info[:2],
            os.path.realpath(python),
            WORKER_REQUIREMENTS,
            *([indexes.public()] if indexes else []),
            *([extra] if extra else []),  # none: the key of a venv built before --with existed
            # none: the key of a venv held to no baseline, as every venv was before pins existed
            *([{"baseline_pins": pins.digest}] if pins else []),
        ]
    )
    key = hashlib.sha256(key_src.encode()).hexdigest()[:16]
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", redact_text(requirement).replace("***@", ""))[:80]
    return cache_root() / "venvs" / f"{name}-{key}"


def venv_for(
    requirement: str,
    *,
    log: Path | None = None,
    python: str = sys.executable,
    indexes: Indexes | None = None,
    with_requirements: Sequence[str] = (),
    pins: BaselinePins | None = None,
) -> tuple[Path, float]:
    """A cached venv with this torch requirement and the extra requirements, installed from
    these indexes, and held to the baseline's pins when given (suite/execute/pinned.py: its
    record, PINS_FILE, says what was held); built once, reused after (returns build time). The
    cache key holds the indexes, the extra requirements without credentials and the pins' digest,
    so another index, package or baseline is another venv and another token is not; pip gets
    them in its environment.
    Before each reuse the venv is checked against the manifest written when it was built
    (suite/execute/manifest.py): one that differs, or has none, is removed and built again."""
    indexes = indexes or Indexes()
    venv = venv_path(requirement, python, indexes, with_requirements, pins)
    venv.parent.mkdir(parents=True, exist_ok=True)
    # Two runs on one runner (two jobs, two A/Bs) may want the same venv at once: the second
    # waits for the first's build instead of removing it half-made as an unfinished one. The
    # check before reuse runs under the same lock, so no build is judged half-way.
    with open(venv.parent / f"{venv.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if _reusable(venv) and (pins is None or read_record(venv) is not None):
            return _venv_python(venv), 0.0
        return _build_venv(venv, (requirement, *with_requirements), python, indexes, log, pins)


def _reusable(venv: Path) -> bool:
    """Whether the venv holds exactly what it held when it was built. One whose build never
    finished is rebuilt silently; one that an older torch-matrix built (no manifest) or that
    changed since (a pull request's code may have written into it) is named, with why."""
    if not (venv / READY).is_file():
        return False
    recorded = read_manifest(venv)
    if recorded is None:
        why = f"no manifest ({manifest_path(venv).name}) of what it held when it was built"
    else:
        found = differences(venv, recorded)
        if not found:
            return True
        more = " (and more)" if len(found) > SHOWN else ""
        why = f"{', '.join(found[:SHOWN])}{more} since it was built"
    warn(f"venv cache {venv}: {why}: rebuilding")
    return False


def _build_venv(
    venv: Path,
    requirements: Sequence[str],
    python: str,
    indexes: Indexes,
    log: Path | None,
    pins: BaselinePins | None = None,
) -> tuple[Path, float]:
    """requirements: torch's first, then the extra ones. One pip call resolves them together,
    so pip picks versions of the extra ones that fit this torch, or fails the build; with pins,
    a second call then puts back the baseline's versions of what pip moved (pinned.hold)."""
    start = time.perf_counter()
    manifest_path(venv).unlink(missing_ok=True)  # written again only once the build is done
    if venv.exists():
        shutil.rmtree(venv)  # an earlier build that did not finish, or one that changed since
    with tempfile.TemporaryDirectory(prefix="torch-matrix-pip-") as folder:
        _install(venv, requirements, python, indexes, log, pins, own_pip(Path(folder)))
    (venv / READY).write_text(redact_text(" ".join(requirements)) + "\n", encoding="utf-8")
    write_manifest(venv)
    return _venv_python(venv), time.perf_counter() - start


def _install(
    venv: Path,
    requirements: Sequence[str],
    python: str,
    indexes: Indexes,
    log: Path | None,
    pins: BaselinePins | None,
    home: Path,
) -> None:
    """The venv made and its pip calls run, pip from HOME (guarded.own_pip)."""
    shown = redact_text(" ".join(requirements))
    # No code a pull request could have placed runs while an index credential is in pip's
    # environment: wheels only (no package's build code), and pip is the suite's own, started
    # with -I -S and no .pth line or customize module run (suite/execute/guarded.py), so neither
    # the checkout's folders nor what the first call installed run in the second.
    pip = [*pip_install(_venv_python(venv), home), "--disable-pip-version-check"]
    pip += list(WHEELS_ONLY)
    given = [requirements[0], *WORKER_REQUIREMENTS, *requirements[1:]]
    steps = [[python, "-I", "-m", "venv", "--without-pip", str(venv)], [*pip, "-q", *given]]
    env = {**os.environ, **indexes.pip_env()}
    where = f" from {indexes.shown()}" if indexes else ""

    def run(argv: list[str]) -> subprocess.CompletedProcess[str]:
        return _logged(argv, env, log, where)

    for argv in steps:
        proc = run(argv)
        if proc.returncode != 0:
            shutil.rmtree(venv, ignore_errors=True)
            raise EnvironmentProblem(
                f"could not prepare an environment for {shown!r}{where}: "
                f"{' '.join(redact_text(' '.join(argv)).split()[:4])} … exited "
                f"{proc.returncode}:\n{redact_text(proc.stderr.strip())[-1500:]}"
            )
    if pins is not None:
        try:
            record = hold(str(_venv_python(venv)), pins, pip, run, given)
        except EnvironmentProblem:
            shutil.rmtree(venv, ignore_errors=True)
            raise
        write_record(venv, record)  # before the manifest, which then covers it


def _logged(
    argv: list[str], env: dict[str, str], log: Path | None, where: str
) -> subprocess.CompletedProcess[str]:
    """One step of a venv's build, its output appended to the log (redacted)."""
    shown_argv = redact_text(" ".join(argv))
    try:
        proc = subprocess.run(
            argv, capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S, check=False, env=env
        )
    except subprocess.TimeoutExpired as exc:
        raise EnvironmentProblem(f"{shown_argv} timed out after {INSTALL_TIMEOUT_S:.0f}s") from exc
    if log is not None:
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "a", encoding="utf-8") as fh:
            fh.write(redact_text(f"$ {shown_argv}{where}\n{proc.stdout}{proc.stderr}\n"))
    return proc


def prepare(
    spec: str,
    role: str,
    *,
    log: Path | None = None,
    indexes: Indexes | None = None,
    with_requirements: Sequence[str] = (),
    pins: BaselinePins | None = None,
) -> PreparedSide:
    """The side a spec names, ready to run workers (a venv built, an image resolved, an
    interpreter checked). Indexes apply to a torch requirement only: another kind of side has its
    torch already. The extra requirements (--with) are installed into a requirement side's venv;
    an interpreter side must hold them already, and an image side cannot take them. The
    baseline's pins hold a requirement side's venv to the baseline (baseline_pins); another kind
    of side is what it is, and takes none."""
    kind = _kind(spec, role)
    if indexes and kind.name != "requirement":
        raise InputError(
            f"an index URL applies to a torch requirement side (torch==X.Y.Z), not to {spec!r}",
            option=f"--{role}-index-url",
        )
    extra = admitted(spec, role, with_requirements)
    if indexes:
        indexes.expanded(option=f"--{role}-index-url")  # a missing ${VAR} fails before pip
    return kind.prepare(
        spec, role, log, indexes or Indexes(), extra, pins if kind.takes_pins else None
    )


def takes_pins(spec: str, role: str) -> bool:
    """Whether this kind of side is built for a baseline's pins (a venv is; nothing else is
    built), so that reading them is worth it."""
    return _kind(spec, role).takes_pins


def baseline_pins(side: PreparedSide, moving: Iterable[str]) -> BaselinePins | None:
    """The pins of a prepared baseline: the version of each distribution its interpreter holds,
    but torch and MOVING (what moves with it: suite/judge/packages.py's COMPANIONS, which the
    caller passes, as this layer does not import the judge's). None for an image side: its
    packages are inside an image that only a container could list, so a candidate venv is then
    built as pip resolves it, unheld, as it was before pins existed."""
    if side.kind == "docker":
        return None
    return read_pins(side.interpreter, "baseline", moving)


def takes_extra(spec: str, role: str) -> bool:
    """Whether this kind of side installs or checks extra requirements (an image does not)."""
    return _kind(spec, role).takes_extra


def admitted(spec: str, role: str, with_requirements: Sequence[str]) -> tuple[str, ...]:
    """The extra requirements, parsed, where this kind of side can take them; an InputError
    naming --with where it cannot (an image is what it was built with: nothing is installed into
    it here). Called for both sides before either is prepared, so a refusal comes first."""
    extra = tuple(parse_requirement(r, option="--with") for r in with_requirements)
    if extra and not _kind(spec, role).takes_extra:
        raise InputError(
            f"an image side ({redact_text(spec)}) takes no extra requirements: build the image "
            "with them, torch-matrix image build --with REQ",
            option="--with",
        )
    return extra


def _current(
    spec: str,
    role: str,
    log: Path | None,
    indexes: Indexes,
    extra: tuple[str, ...],
    pins: BaselinePins | None,
) -> PreparedSide:
    check_interpreter(sys.executable, role, extra)
    return PreparedSide(spec, "current", sys.executable, 0.0, "current", with_requirements=extra)


def _python(
    spec: str,
    role: str,
    log: Path | None,
    indexes: Indexes,
    extra: tuple[str, ...],
    pins: BaselinePins | None,
) -> PreparedSide:
    path = shutil.which(spec) or spec
    if not Path(path).is_file():
        raise InputError(f"interpreter {spec!r} does not exist", option=f"--{role}")
    check_interpreter(path, role, extra)
    label = Path(path).parent.parent.name or spec
    return PreparedSide(spec, label, path, 0.0, "python", with_requirements=extra)


def _docker(
    spec: str,
    role: str,
    log: Path | None,
    indexes: Indexes,
    extra: tuple[str, ...],
    pins: BaselinePins | None,
) -> PreparedSide:
    from suite.execute.docker import prepare_docker  # the Docker SDK only when a side needs it

    return prepare_docker(spec, role)


def _requirement(
    spec: str,
    role: str,
    log: Path | None,
    indexes: Indexes,
    extra: tuple[str, ...],
    pins: BaselinePins | None,
) -> PreparedSide:
    interpreter, took = venv_for(spec, log=log, indexes=indexes, with_requirements=extra, pins=pins)
    label = redact_text(spec) + (f" ({indexes.shown()})" if indexes else "")
    # A reused venv says what its build held and relaxed, as the build itself did.
    record = read_record(interpreter.parent.parent) if pins is not None else None
    return PreparedSide(
        spec, label, str(interpreter), took, "requirement", indexes=indexes,
        with_requirements=extra, pins=pins, relaxed=record.relaxed if record else (),
    )  # fmt: skip


@dataclass(frozen=True)
class SideKind:
    """One form a --baseline/--candidate takes: how to tell it, and how to make it ready."""

    name: str
    matches: Callable[[str], bool]
    # spec, role, the log of its preparation, indexes, extra requirements, the baseline's pins
    prepare: Callable[
        [str, str, Path | None, Indexes, tuple[str, ...], BaselinePins | None], PreparedSide
    ]
    takes_extra: bool = True  # whether --with can be installed into or checked in it
    takes_pins: bool = False  # whether it is built, and so can be held to a baseline's pins


# Tried in order: the first kind whose test matches the spec is its kind.
KINDS: tuple[SideKind, ...] = (
    SideKind("current", lambda spec: spec == "current", _current),
    SideKind("docker", lambda spec: spec.startswith("docker:"), _docker, takes_extra=False),
    SideKind(
        "requirement",
        lambda spec: bool(_REQUIREMENT.match(spec)) or spec.startswith(("torch==", "torch @")),
        _requirement,
        takes_pins=True,
    ),
    SideKind("python", lambda spec: os.sep in spec or spec.startswith("python"), _python),
)
