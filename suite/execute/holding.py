"""Holding a candidate's venv to the baseline's pins (suite/execute/pinned.py): which packages
go back to the baseline's version or into the venv at it, which cannot and why, and the pip call
that puts them there with every other version constrained, checked after it ran."""

from __future__ import annotations

import re
import subprocess
import tempfile
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from packaging.markers import UndefinedComparison, UndefinedEnvironmentName
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from suite.core.errors import EnvironmentProblem
from suite.core.secrets import redact_text
from suite.execute.pinned import (
    ABSENT,
    SHOWN,
    BaselinePins,
    Installed,
    PinsRecord,
    Relaxation,
    pep440,
    read_installed,
    same_version,
)
from suite.execute.side_deps import applies

_TAIL = 1500
# pip's words for a requirement no index serves: the package it names is left out, and the rest
# tried again, at most RETRIES times.
_NOT_FOUND = re.compile(
    r"(?:No matching distribution found for|satisfies the requirement) ([A-Za-z0-9._-]+)=="
)
RETRIES = 5


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
    """Which packages go back to (or into) the venv at the baseline's version: every package the
    baseline holds that the venv lacks or holds at another version. Every package that keeps
    the venv's version (torch and what moves with it, pip, those the baseline lacks) constrains
    the rest by its requirements; a package whose baseline version one of them forbids keeps the
    venv's version too, so its requirements constrain in turn (sympy moved by torch moves
    mpmath). A package the venv lacks comes with the baseline's requirements: one that a kept
    package does not meet (an extension built for the baseline's torch) leaves it out, named.
    REQUESTED: the requirements pip was given, for the extras they ask."""
    held = pins.versions
    applying = requirements(installed, requested)
    versions = {name: version for name, (version, _) in installed.dists.items()}
    differs = {n for n in held if n not in versions or not same_version(held[n], versions[n])}
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
            relaxed[name] = Relaxation(name, held[name], versions.get(name, ABSENT), why)
            keeping.append(name)
    _leave_out_absent(pins, installed, versions, differs, relaxed)
    pinned = {n: held[n] for n in sorted(differs) if n not in relaxed}
    return Holding(pinned, tuple(relaxed[n] for n in sorted(relaxed)))


def _leave_out_absent(
    pins: BaselinePins,
    installed: Installed,
    versions: Mapping[str, str],
    differs: set[str],
    relaxed: dict[str, Relaxation],
) -> None:
    """Relax each package the venv lacks whose baseline requirements the venv cannot meet: a
    package it keeps at another version than the requirement allows, or one left out itself."""
    held, asks = pins.versions, dict(pins.requires)
    changed = True
    while changed:
        changed = False
        for name in sorted(differs - versions.keys() - relaxed.keys()):
            for text in asks.get(name, ()):
                try:
                    req = Requirement(text)
                except InvalidRequirement:
                    continue
                if not _applies(req, installed.markers, set()):
                    continue
                target = canonicalize_name(req.name)
                kept = versions.get(target) if target not in differs or target in relaxed else None
                if target in relaxed and target not in versions:
                    why = f"{name} {held[name]} requires {req.name}, which is left out too"
                elif kept is not None and not req.specifier.contains(kept, prereleases=True):
                    why = (
                        f"{name} {held[name]} requires {req.name}{req.specifier}, and the "
                        f"candidate has {target} {kept}"
                    )
                else:
                    continue
                relaxed[name] = Relaxation(name, held[name], ABSENT, why)
                changed = True
                break


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
        if n not in held and n != "pip" and pep440(v) is not None
    }
    return "".join(f"{n}=={v}\n" for n, v in sorted({**held, **kept}.items()))


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
    pinned, dropped = dict(holding.pinned), list[Relaxation]()
    proc = _put_back(pins, holding, installed, pinned, pip, run)
    for _ in range(RETRIES):
        absent = {n: v for n, v in pinned.items() if n not in installed.dists}
        if proc.returncode == 0 or not absent:
            break
        # A package the venv lacks that pip cannot install for this candidate (no such version on
        # its index, no wheel for it) is left out and named: the ones pip names, else all it
        # lacks; what the venv holds is still held.
        why = _last_line(proc.stderr) or f"pip exited {proc.returncode}"
        named = {str(canonicalize_name(m)) for m in _NOT_FOUND.findall(proc.stderr)}
        out = (named & set(absent)) or set(absent)
        dropped += [
            Relaxation(n, absent[n], ABSENT, f"pip could not add it to the candidate's venv: {why}")
            for n in sorted(out)
        ]
        pinned = {n: v for n, v in pinned.items() if n not in out}
        if not pinned:
            proc = subprocess.CompletedProcess(proc.args, 0, "", "")
            break
        proc = _put_back(pins, holding, installed, pinned, pip, run)
    wanted = [f"{n}=={v}" for n, v in pinned.items()]
    what = f"--{role}: could not hold the venv's {', '.join(wanted)} at the baseline's versions"
    if proc.returncode != 0:
        raise EnvironmentProblem(
            f"{what} (pip exited {proc.returncode}); only the torch pin may differ between the "
            f"sides, so the candidate is not built otherwise:\n"
            f"{redact_text(proc.stderr.strip())[-_TAIL:]}"
        )
    installed = read(python, role)
    after = plan(pins, installed, requested)
    gave_up = {r.name for r in dropped}
    left = [
        f"{n} {installed.dists[n][0] if n in installed.dists else ABSENT}"
        for n in after.pinned
        if n not in gave_up
    ]
    broken = sorted(conflicts(installed, requested) - unmet)
    if left or broken:  # pip exited 0 all the same
        said = f"pip left {', '.join(left)}" if left else "; ".join(broken[:SHOWN])
        raise EnvironmentProblem(f"{what}: {said}")
    relaxed = {r.name: r for r in (*after.relaxed, *dropped)}
    return PinsRecord(
        pins.digest, tuple(pinned.items()), tuple(relaxed[n] for n in sorted(relaxed))
    )


def _put_back(
    pins: BaselinePins,
    holding: Holding,
    installed: Installed,
    pinned: Mapping[str, str],
    pip: list[str],
    run: Pip,
) -> subprocess.CompletedProcess[str]:
    """One pip call: the packages at the baseline's versions, every other version constrained."""
    with tempfile.TemporaryDirectory(prefix="torch-matrix-pins-") as folder:
        file = Path(folder) / "baseline-constraints.txt"
        file.write_text(constraints(pins, holding, installed), encoding="utf-8")
        return run([*pip, "-q", "-c", str(file), *(f"{n}=={v}" for n, v in pinned.items())])


def _last_line(text: str) -> str:
    lines = [line.strip() for line in redact_text(text).splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""
