"""The baseline's pins: the version of every distribution the baseline side holds, and what a
candidate's venv does with them. An A/B changes the torch pin and nothing else, so the venv built
for a torch requirement side holds every package it installed at the baseline's version, except
torch, what moves with it (its companions, named by the caller), pip, and the packages whose
baseline version the candidate's own requirements forbid: each of those is a relaxation, named.

pip resolves the newest of everything, so the venv is built first as pip chooses and then held:
a second pip call puts back the baseline's version of each package that differs, with every other
version constrained so that pip cannot move another package while doing it. The venv records what
was held and relaxed (PINS_FILE) so that a reused venv says the same."""

from __future__ import annotations

import hashlib
import json
import subprocess
import tempfile
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from packaging.markers import UndefinedComparison, UndefinedEnvironmentName
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from suite.core.errors import EnvironmentProblem
from suite.core.results import atomic_write_json
from suite.core.secrets import redact_text
from suite.execute.side_deps import MARKERS_SOURCE, applies, ask

PINS_FILE = ".torch-matrix-pins.json"  # inside the venv: the manifest covers it
KIND = "torch-matrix/venv-pins"
SCHEMA_VERSION = 1
# Never held at the baseline's version, whatever the caller names: torch is the pin itself, and
# pip is the venv's installer (ensurepip's), which no workload imports.
UNHELD = frozenset({"torch", "pip"})
_TAIL = 1500
SHOWN = 3  # how many unmet requirements a message names

# Run by a side's interpreter: every distribution where it looks, in sys.path order (the first of
# a name is the one imported), with its Requires-Dist when asked, and its marker environment.
_LIST = (
    """\
import json, os, platform, sys
from importlib import metadata
with_requires = json.loads(sys.argv[1])
dists = []
for dist in metadata.distributions():
    name = dist.metadata["Name"]
    if name:
        dists.append([name, dist.version, (dist.requires or []) if with_requires else []])
"""
    + MARKERS_SOURCE
    + """\
sys.stdout.write("\\n" + json.dumps({"dists": dists, "markers": markers}))
"""
)


def _version(text: str) -> Version | None:
    try:
        return Version(text)
    except InvalidVersion:
        return None


def same_version(a: str, b: str) -> bool:
    """1.0 and 1.0.0 are one version; a version PEP 440 cannot read is compared as text."""
    va, vb = _version(a), _version(b)
    return va == vb if va is not None and vb is not None else a == b


@dataclass(frozen=True)
class BaselinePins:
    """What a candidate's venv is held to: (canonical name, version) of each distribution the
    baseline holds, sorted, without what moves with the pin (`moving`, and UNHELD always). A
    version pip cannot pin (not PEP 440) is no pin."""

    pins: tuple[tuple[str, str], ...]
    moving: frozenset[str]

    @classmethod
    def of(cls, versions: Mapping[str, str], moving: Iterable[str] = ()) -> BaselinePins:
        free = frozenset(canonicalize_name(m) for m in moving) | UNHELD
        held: dict[str, str] = {}
        for name, version in versions.items():
            key = canonicalize_name(name)
            if key not in free and key not in held and _version(version) is not None:
                held[key] = version
        return cls(tuple(sorted(held.items())), free)

    @property
    def versions(self) -> dict[str, str]:
        return dict(self.pins)

    @property
    def digest(self) -> str:
        """sha256 of the pins and of what moves: part of the venv's cache key, so another
        baseline is another venv."""
        text = json.dumps([[list(p) for p in self.pins], sorted(self.moving)])
        return hashlib.sha256(text.encode()).hexdigest()


def read_pins(interpreter: str, role: str, moving: Iterable[str]) -> BaselinePins:
    """The pins of a side's interpreter, asked in it with the environment a worker inherits:
    the versions its workloads import."""
    found = _list(interpreter, role, with_requires=False, isolated=False)
    return BaselinePins.of({name: version for name, (version, _) in found[0].items()}, moving)


@dataclass(frozen=True)
class Installed:
    """What a venv holds: canonical name -> (version, Requires-Dist), and its marker environment."""

    dists: dict[str, tuple[str, tuple[str, ...]]]
    markers: dict[str, str]


def read_installed(python: str, role: str) -> Installed:
    """What a venv's interpreter holds, asked in isolation (-I): what its pip sees and changes."""
    dists, markers = _list(python, role, with_requires=True, isolated=True)
    return Installed(dists, markers)


def _list(
    interpreter: str, role: str, *, with_requires: bool, isolated: bool
) -> tuple[dict[str, tuple[str, tuple[str, ...]]], dict[str, str]]:
    answer: Any = ask(
        interpreter, role, _LIST, with_requires, doing="list its distributions", isolated=isolated
    )
    try:
        dists: dict[str, tuple[str, tuple[str, ...]]] = {}
        for name, version, requires in answer["dists"]:  # the first of a name is imported
            dists.setdefault(
                canonicalize_name(str(name)), (str(version), tuple(map(str, requires)))
            )
        return dists, {str(k): str(v) for k, v in answer["markers"].items()}
    except (KeyError, TypeError, ValueError, AttributeError):
        raise EnvironmentProblem(
            f"--{role}: the interpreter {interpreter} listed its distributions in a form this "
            "suite does not read"
        ) from None


@dataclass(frozen=True)
class Relaxation:
    """A package the candidate's venv cannot hold at the baseline's version, and why."""

    name: str
    baseline: str
    candidate: str
    required: str  # "torch 2.14.1 requires sympy>=1.13.3"

    def line(self) -> str:
        return f"{self.name} {self.baseline} → {self.candidate}: {self.required}"

    def warning(self) -> str:
        return (
            f"the candidate's venv could not keep {self.name} at the baseline's {self.baseline} "
            f"({self.candidate} instead): {self.required}"
        )


@dataclass(frozen=True)
class Holding:
    """What to do with a venv: the packages to put back at the baseline's version, and those
    that cannot be."""

    pinned: dict[str, str]  # canonical name -> the baseline's version
    relaxed: tuple[Relaxation, ...]


def requirements(
    installed: Installed, requested: Iterable[str] = ()
) -> dict[str, list[Requirement]]:
    """Each installed distribution's requirements that apply in the venv: under its markers, with
    every extra asked of it by another's requirement or by one pip was given (REQUESTED), since
    torch's cuda-toolkit[cublas] pulls in what cuda-toolkit requires for cublas. A requirement
    that cannot be read is left out (pip did not install by it either); a marker that cannot be
    decided is taken as applying."""
    extras: dict[str, set[str]] = {name: set() for name in installed.dists}
    parsed: dict[str, list[Requirement]] = {}
    for owner, (_, texts) in [("", ("", tuple(requested))), *installed.dists.items()]:
        parsed[owner] = []
        for text in texts:
            try:
                parsed[owner].append(Requirement(text))
            except InvalidRequirement:
                continue
    applying: dict[str, list[Requirement]] = {}
    changed = True
    while changed:  # an extra asked under another extra asks in turn
        changed = False
        for owner, reqs in parsed.items():
            applying[owner] = [r for r in reqs if _applies(r, installed.markers, extras.get(owner))]
            for req in applying[owner]:
                asked = extras.get(canonicalize_name(req.name))
                if asked is not None and not req.extras <= asked:
                    asked |= req.extras
                    changed = True
    del applying[""]
    return applying


def _applies(req: Requirement, markers: Mapping[str, str], extras: set[str] | None) -> bool:
    try:
        return req.marker is None or applies(req.marker, markers, sorted(extras or ()))
    except (UndefinedComparison, UndefinedEnvironmentName):
        return True


def plan(pins: BaselinePins, installed: Installed, requested: Iterable[str] = ()) -> Holding:
    """Which packages go back to the baseline's version. Every package that keeps the venv's
    version (torch and what moves with it, pip, those the baseline lacks) constrains the rest by
    its requirements; a package whose baseline version one of them forbids keeps the venv's
    version too, so its requirements constrain in turn (sympy moved by torch moves mpmath).
    REQUESTED: the requirements pip was given, for the extras they ask."""
    held = pins.versions
    applying = requirements(installed, requested)
    versions = {name: version for name, (version, _) in installed.dists.items()}
    differs = {n for n, v in versions.items() if n in held and not same_version(held[n], v)}
    relaxed: dict[str, Relaxation] = {}
    keeping = [n for n in installed.dists if n not in differs]
    while keeping:
        owner = keeping.pop(0)
        for req in applying[owner]:
            name = canonicalize_name(req.name)
            if name not in differs or name in relaxed:
                continue
            if req.specifier.contains(held[name], prereleases=True):
                continue
            why = f"{owner} {versions[owner]} requires {req.name}{req.specifier}"
            relaxed[name] = Relaxation(name, held[name], versions[name], why)
            keeping.append(name)
    pinned = {n: held[n] for n in sorted(differs) if n not in relaxed}
    return Holding(pinned, tuple(relaxed[n] for n in sorted(relaxed)))


def conflicts(installed: Installed, requested: Iterable[str] = ()) -> set[str]:
    """Each requirement of an installed distribution that the installed version of its target
    does not meet, as a line: pip warns of those it leaves and still exits 0."""
    versions = {name: version for name, (version, _) in installed.dists.items()}
    return {
        f"{owner} {versions[owner]} requires {req.name}{req.specifier}, but {target} is there"
        for owner, reqs in requirements(installed, requested).items()
        for req in reqs
        if (target := versions.get(canonicalize_name(req.name))) is not None
        and not req.specifier.contains(target, prereleases=True)
    }


def constraints(pins: BaselinePins, holding: Holding, installed: Installed) -> str:
    """The constraints of the second pip call: the baseline's version of every package held, and
    the venv's own version of every package it keeps (but pip), so that putting some back moves
    nothing else; a conflict fails the call instead of going unnoticed."""
    relaxed = {r.name for r in holding.relaxed}
    held = {n: v for n, v in pins.pins if n not in relaxed}
    kept = {
        n: v
        for n, (v, _) in installed.dists.items()
        if n not in held and n != "pip" and _version(v) is not None
    }
    return "".join(f"{n}=={v}\n" for n, v in sorted({**held, **kept}.items()))


@dataclass(frozen=True)
class PinsRecord:
    """What a venv built for a baseline holds of it (PINS_FILE)."""

    baseline_digest: str
    pinned: tuple[tuple[str, str], ...]
    relaxed: tuple[Relaxation, ...]

    def as_json(self) -> dict[str, Any]:
        return {
            "kind": KIND,
            "schema_version": SCHEMA_VERSION,
            "baseline_digest": self.baseline_digest,
            "pinned": dict(self.pinned),
            "relaxed": [asdict(r) for r in self.relaxed],
        }


def write_record(venv: Path, record: PinsRecord) -> None:
    atomic_write_json(venv / PINS_FILE, record.as_json())


def read_record(venv: Path) -> PinsRecord | None:
    """The venv's record; None when it has none or one this suite does not read (the venv is
    then built again, never trusted)."""
    try:
        doc = json.loads((venv / PINS_FILE).read_text("utf-8"))
        if doc["kind"] != KIND or doc["schema_version"] != SCHEMA_VERSION:
            return None
        return PinsRecord(
            str(doc["baseline_digest"]),
            tuple((str(n), str(v)) for n, v in doc["pinned"].items()),
            tuple(
                Relaxation(str(r["name"]), str(r["baseline"]), str(r["candidate"]),
                           str(r["required"]))
                for r in doc["relaxed"]
            ),
        )  # fmt: skip
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


# One pip call of the build: logged, in its environment, timed out as the build is.
Pip = Callable[[list[str]], subprocess.CompletedProcess[str]]


def hold(
    python: str,
    pins: BaselinePins,
    pip: list[str],
    run: Pip,
    requested: Iterable[str] = (),
    role: str = "candidate",
    read: Callable[[str, str], Installed] = read_installed,
) -> PinsRecord:
    """Put the baseline's versions back into a venv that pip has just built: pip is the venv's
    `python -m pip install …` argv, run runs one pip call (logged, with the build's environment),
    requested the requirements the build gave pip. An EnvironmentProblem names the packages when
    pip cannot hold them, did not, or left a requirement unmet by holding them."""
    installed = read(python, role)
    holding = plan(pins, installed, requested)
    if not holding.pinned:
        return PinsRecord(pins.digest, (), holding.relaxed)
    unmet = conflicts(installed, requested)
    wanted = [f"{n}=={v}" for n, v in holding.pinned.items()]
    with tempfile.TemporaryDirectory(prefix="torch-matrix-pins-") as folder:
        file = Path(folder) / "baseline-constraints.txt"
        file.write_text(constraints(pins, holding, installed), encoding="utf-8")
        proc = run([*pip, "-q", "-c", str(file), *wanted])
    what = f"--{role}: could not hold the venv's {', '.join(wanted)} at the baseline's versions"
    if proc.returncode != 0:
        raise EnvironmentProblem(
            f"{what} (pip exited {proc.returncode}); only the torch pin may differ between the "
            f"sides, so the candidate is not built otherwise:\n"
            f"{redact_text(proc.stderr.strip())[-_TAIL:]}"
        )
    installed = read(python, role)
    after = plan(pins, installed, requested)
    left = [f"{n} {installed.dists[n][0]}" for n in after.pinned]
    broken = sorted(conflicts(installed, requested) - unmet)
    if left or broken:  # pip exited 0 all the same
        said = f"pip left {', '.join(left)}" if left else "; ".join(broken[:SHOWN])
        raise EnvironmentProblem(f"{what}: {said}")
    return PinsRecord(pins.digest, tuple(holding.pinned.items()), after.relaxed)
