"""A side's extra requirements (--with REQ, --requirements FILE): what a workload needs beside
torch and this suite. A torch requirement side installs them into its venv; a side that names an
interpreter must already hold them, and is checked here, before any cell runs, for them and for
what the suite's own workers import."""

from __future__ import annotations

import json
import shlex
import subprocess
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TypedDict, cast

from packaging.markers import Marker
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from suite.core.errors import EnvironmentProblem, InputError
from suite.core.secrets import MASK, redact_text
from suite.execute.guarded import guarded

# What a worker imports besides torch (module -> the requirement that provides it); a venv side
# installs these with its torch, an interpreter side must have them.
WORKER_NEEDS = {"jsonschema": "jsonschema>=4.18", "yaml": "PyYAML>=6.0", "numpy": "numpy"}
# Long enough for a cold import of torch from a slow disk, short enough to fail before a run.
CHECK_TIMEOUT_S = 120.0
_TAIL = 1500

# Part of every probe script (after `import os, platform, sys`): the interpreter's environment
# for PEP 508 markers, as `markers`. The parent evaluates markers with it, since packaging, which
# evaluates them, need not be installed where the probe runs.
MARKERS_SOURCE = """\
impl = sys.implementation
iv = "%d.%d.%d" % impl.version[:3]
if impl.version.releaselevel != "final":
    iv += impl.version.releaselevel[0] + str(impl.version.serial)
markers = {
    "implementation_name": impl.name, "implementation_version": iv, "os_name": os.name,
    "platform_machine": platform.machine(), "platform_release": platform.release(),
    "platform_system": platform.system(), "platform_version": platform.version(),
    "python_full_version": platform.python_version(),
    "platform_python_implementation": platform.python_implementation(),
    "python_version": ".".join(platform.python_version_tuple()[:2]), "sys_platform": sys.platform,
}
"""

# Run by the side's interpreter, whatever its Python: the modules that fail to import (with why),
# the installed version of each distribution (None: not installed), and its marker environment.
_PROBE = (
    """\
import importlib, json, os, platform, sys
from importlib import metadata
modules, dists = json.loads(sys.argv[1])
failed, versions = {}, {}
for name in modules:
    try:
        importlib.import_module(name)
    except BaseException as exc:
        failed[name] = "%s: %s" % (type(exc).__name__, exc)
for name in dists:
    try:
        versions[name] = metadata.version(name)
    except Exception:
        versions[name] = None
"""
    + MARKERS_SOURCE
    + """\
sys.stdout.write("\\n" + json.dumps({"failed": failed, "versions": versions, "markers": markers}))
"""
)


def parse_requirement(
    text: str, *, option: str | None = None, file: str | None = None, path: str | None = None
) -> str:
    """The requirement, stripped, once it parses and does not name torch (the side names
    torch); an InputError naming where it came from otherwise."""
    text = text.strip()
    try:
        req = Requirement(text)
    except InvalidRequirement as exc:
        raise InputError(
            f"{redact_text(text)!r} is not a requirement (NAME, NAME==X.Y, NAME @ URL): {exc}",
            option=option,
            file=file,
            path=path,
        ) from None
    if canonicalize_name(req.name) == "torch":
        raise InputError(
            f"{redact_text(text)!r} names torch itself: torch is the side's (--baseline, "
            "--candidate), not an extra requirement",
            option=option,
            file=file,
            path=path,
        )
    return text


def read_requirements(path: Path) -> tuple[str, ...]:
    """The requirements of a requirements file, one a line; blank lines and comments are
    skipped. A pip option line (-r, -e, --index-url) or a line naming torch is an InputError
    naming the file and line: the file lists packages, the sides and their options say the rest."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        raise InputError(
            "no such requirements file", file=str(path), option="--requirements"
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(
            f"cannot be read: {exc}", file=str(path), option="--requirements"
        ) from None
    found = []
    for number, line in enumerate(lines, 1):
        text = line.split(" #", 1)[0].split("\t#", 1)[0].strip()
        where = f"{path}:{number}"
        if not text or text.startswith("#"):
            continue
        if text.startswith("-"):
            raise InputError(
                f"{redact_text(text)!r} is a pip option; list one package a line here (indexes "
                "go in --baseline-index-url and --candidate-index-url)",
                file=where,
                option="--requirements",
            )
        found.append(parse_requirement(text, file=where, option="--requirements"))
    return tuple(found)


def extra_requirements(given: Sequence[str], file: Path | None) -> tuple[str, ...]:
    """--with's requirements, then the file's, each once, in the order given."""
    from_file = read_requirements(file) if file is not None else ()
    given = [parse_requirement(g, option="--with") for g in given]
    return tuple(dict.fromkeys([*given, *from_file]))


def check_interpreter(interpreter: str, role: str, with_requirements: Sequence[str]) -> None:
    """Raise EnvironmentProblem, naming the interpreter and each thing it lacks, unless it
    imports torch and the worker's modules and holds each extra requirement at a version that
    the requirement admits."""
    reqs = [Requirement(r) for r in with_requirements]
    found = _probe(interpreter, role, ["torch", *WORKER_NEEDS], [r.name for r in reqs])
    problems = [f"cannot import {name} ({why})" for name, why in found["failed"].items()]
    fixes = [WORKER_NEEDS.get(name, name) for name in found["failed"]]
    for req, text in zip(reqs, with_requirements, strict=True):
        if req.marker is not None and not applies(req.marker, found["markers"]):
            continue
        version = found["versions"].get(req.name)
        if version is None:
            problems.append(f"{req.name} is not installed")
        elif not req.specifier.contains(version, prereleases=True):
            problems.append(f"{req.name} {version} is installed, but {redact_text(text)} is asked")
        else:
            continue
        fixes.append(text)
    if problems:
        pip = " ".join(shlex.quote(redact_text(f)) for f in fixes)
        raise EnvironmentProblem(
            f"--{role}: the interpreter {interpreter} cannot run these cells: "
            f"{'; '.join(problems)}. Install them into it ({interpreter} -m pip install {pip}), "
            "or use a torch==X.Y.Z side, whose venv installs them given --with REQ"
        )


def applies(marker: Marker, environment: Mapping[str, str], extras: Iterable[str] = ()) -> bool:
    """Whether a requirement's marker holds in an interpreter's marker environment (a probe's
    `markers`) for its distribution installed plainly or with one of these extras."""
    return any(marker.evaluate({**environment, "extra": extra}) for extra in ("", *extras))


class Held(TypedDict):
    """What the probe found in an interpreter."""

    failed: dict[str, str]  # module -> why it did not import
    versions: dict[str, str | None]  # distribution -> installed version
    markers: dict[str, str]  # its environment for PEP 508 markers


def _probe(interpreter: str, role: str, modules: list[str], dists: list[str]) -> Held:
    """What the interpreter imports and holds, asked in it with the environment a worker
    inherits."""
    found = ask(
        interpreter, role, _PROBE, [modules, dists], doing="import torch and the suite's modules"
    )
    return cast(Held, found)


def ask(
    interpreter: str, role: str, script: str, args: object, *, doing: str, isolated: bool = False
) -> object:
    """The JSON value that SCRIPT writes last on stdout, run by the interpreter with ARGS as JSON
    in argv[1]; an EnvironmentProblem naming the side when it cannot be started, does not answer
    within CHECK_TIMEOUT_S (DOING says what it was asked to do) or writes no JSON. Not -I unless
    isolated: a worker runs without it, so torch from the user's site-packages or PYTHONPATH is
    torch there too; an empty working directory keeps a checkout's folders out. Isolated asks
    about the interpreter's own environment alone (a venv, as pip there sees it)."""
    from suite.execute.environment import inherited_env

    # Isolated, no code from the venv's site-packages runs either (a .pth line, sitecustomize):
    # a candidate's venv is asked after the pull request's packages are in it (guarded.py).
    plain = [interpreter, "-c", script]
    argv = [*(guarded(interpreter, script) if isolated else plain), json.dumps(args)]
    with tempfile.TemporaryDirectory(prefix="torch-matrix-check-") as empty:
        try:
            proc = subprocess.run(
                argv, capture_output=True, text=True, timeout=CHECK_TIMEOUT_S, check=False,
                env=inherited_env(), cwd=empty,
            )  # fmt: skip
        except subprocess.TimeoutExpired:
            raise EnvironmentProblem(
                f"--{role}: the interpreter {interpreter} did not {doing} within "
                f"{CHECK_TIMEOUT_S:.0f}s"
            ) from None
        except OSError as exc:
            raise EnvironmentProblem(f"--{role}: cannot start {interpreter}: {exc}") from None
    try:
        answer: object = json.loads(proc.stdout.rsplit("\n", 1)[-1])
        return answer
    except ValueError:
        tail = redact_text(proc.stderr.strip())[-_TAIL:]
        raise EnvironmentProblem(
            f"--{role}: the interpreter {interpreter} could not be asked what it holds (exit "
            f"{proc.returncode}):\n{tail}"
        ) from None


def resumed(recorded: Sequence[str], given: Sequence[str]) -> tuple[str, ...]:
    """The extra requirements a resumed A/B prepares its sides with: those it recorded, or the
    same given again (a recorded credential is masked, so such a requirement must be given)."""
    if given and sorted(redact_text(g) for g in given) != sorted(recorded):
        shown = " ".join(recorded) or "none"
        raise InputError(f"the A/B being resumed ran with --with {shown}", option="--with")
    if not given and any(f"{MASK}@" in r for r in recorded):
        raise InputError(
            "the A/B being resumed had a credential in a requirement; give --with again",
            option="--with",
        )
    return tuple(given) or tuple(recorded)


def matrix_requirements(requirements: Sequence[str], file: str) -> tuple[str, ...]:
    """The matrix's `requirements:`, each parsed: an InputError names the file and entry."""
    return tuple(
        parse_requirement(r, file=file, path=f"requirements[{i}]")
        for i, r in enumerate(requirements)
    )
