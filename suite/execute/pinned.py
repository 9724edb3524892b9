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
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from suite.core.errors import EnvironmentProblem
from suite.core.results import atomic_write_json
from suite.execute.side_deps import MARKERS_SOURCE, ask

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
        local = dist.read_text("direct_url.json") is not None  # PEP 610: a path, URL or -e
        dists.append([name, dist.version, (dist.requires or []) if with_requires else [], local])
"""
    + MARKERS_SOURCE
    + """\
sys.stdout.write("\\n" + json.dumps({"dists": dists, "markers": markers}))
"""
)


def pep440(text: str) -> Version | None:
    try:
        return Version(text)
    except InvalidVersion:
        return None


def same_version(a: str, b: str) -> bool:
    """1.0 and 1.0.0 are one version; a version PEP 440 cannot read is compared as text."""
    va, vb = pep440(a), pep440(b)
    return va == vb if va is not None and vb is not None else a == b


@dataclass(frozen=True)
class BaselinePins:
    """What a candidate's venv is held to: (canonical name, version) of each distribution the
    baseline holds, sorted, without what moves with the pin (`moving`, and UNHELD always). A
    version pip cannot pin (not PEP 440) is no pin."""

    pins: tuple[tuple[str, str], ...]
    moving: frozenset[str]
    # Each held distribution's Requires-Dist in the baseline: what one the venv lacks asks of
    # the venv's packages once it is put in (not part of the digest: the versions decide it).
    requires: tuple[tuple[str, tuple[str, ...]], ...] = ()

    @classmethod
    def of(cls, versions: Mapping[str, str], moving: Iterable[str] = ()) -> BaselinePins:
        free = frozenset(canonicalize_name(m) for m in moving) | UNHELD
        held: dict[str, str] = {}
        for name, version in versions.items():
            key = canonicalize_name(name)
            if key not in free and key not in held and pep440(version) is not None:
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
    found, _ = _list(interpreter, role, with_requires=True, isolated=False, skip_local=True)
    pins = BaselinePins.of({name: version for name, (version, _) in found.items()}, moving)
    held = pins.versions
    return replace(pins, requires=tuple((n, r) for n, (_, r) in sorted(found.items()) if n in held))


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
    interpreter: str, role: str, *, with_requires: bool, isolated: bool, skip_local: bool = False
) -> tuple[dict[str, tuple[str, tuple[str, ...]]], dict[str, str]]:
    answer: Any = ask(
        interpreter, role, _LIST, with_requires, doing="list its distributions", isolated=isolated
    )
    # A distribution installed from a path or URL (an editable checkout, a local wheel) is one no
    # index serves at its version: neither held nor listed.
    local_names: set[str] = set()
    try:
        dists: dict[str, tuple[str, tuple[str, ...]]] = {}
        for name, version, requires, local in answer["dists"]:  # the first of a name counts
            key = canonicalize_name(str(name))
            if key in dists or key in local_names:
                continue
            if local and skip_local:
                local_names.add(key)
            else:
                dists[key] = (str(version), tuple(map(str, requires)))
        return dists, {str(k): str(v) for k, v in answer["markers"].items()}
    except (KeyError, TypeError, ValueError, AttributeError):
        raise EnvironmentProblem(
            f"--{role}: the interpreter {interpreter} listed its distributions in a form this "
            "suite does not read"
        ) from None


ABSENT = "absent"  # a Relaxation's candidate version: the venv does not hold the package


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
        if self.candidate == ABSENT:
            return (
                f"the candidate's venv could not add {self.name} at the baseline's "
                f"{self.baseline}: {self.required}"
            )
        return (
            f"the candidate's venv could not keep {self.name} at the baseline's {self.baseline} "
            f"({self.candidate} instead): {self.required}"
        )


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
