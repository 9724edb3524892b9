"""A repository's environments, each with its own torch: a Dockerfile is one (the CUDA image,
the ROCm image, the Intel one), and the manifests and locks of one folder are one (pyproject.toml
beside its uv.lock, requirements files beside each other). Where a file's torch pins are in
several parts, each part is one: the build stages of a Dockerfile that builds an XPU and a CPU
image (`Dockerfile_intel#xpu`), the jobs of a workflow (`.github/workflows/ci.yml#test`).

Multi-environment repositories pin different torches on purpose (an inference server's Gaudi
image on the torch its vendor ships, its CUDA image on the newest). Their pins disagree across
environments and always will; what a change moved is told environment by environment: when the
environments that moved agree on from -> to, that is the answer, whatever the others pin; when
they moved differently, which one a backend's job uses cannot be told from the pins alone.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath

from packaging.specifiers import SpecifierSet

from suite.pins.files import pin_file_kind
from suite.pins.requirement import Pin

EffectivePin = Callable[[Sequence[Pin], str], tuple["Pin | None", list[str]]]


def environment_of(file: str) -> str:
    """A Dockerfile or a workflow is an environment of its own; other pin files, their
    folder's."""
    if pin_file_kind(file) in ("dockerfile", "workflow"):
        return file
    parent = str(PurePosixPath(file).parent)
    return "." if parent in ("", ".") else parent


def _parted(pins: Sequence[Pin]) -> set[str]:
    """The files whose torch pins are in more than one part (a Dockerfile's build stages, a
    workflow's jobs) on either side: each part of those is an environment of its own."""
    parts: dict[str, set[str | None]] = {}
    for pin in pins:
        parts.setdefault(pin.included or pin.file, set()).add(pin.part)
    return {file for file, found in parts.items() if len(found) > 1}


def _name(pin: Pin, parted: set[str]) -> str:
    """The environment a pin belongs to: its file's (environment_of), or the part's of a file
    with several (`Dockerfile.intel#xpu`, `.github/workflows/ci.yml#test`)."""
    file = pin.included or pin.file
    if file in parted and pin.part is not None:
        return f"{file}#{pin.part}"
    return environment_of(file)


@dataclass(frozen=True)
class EnvironmentMove:
    environment: str
    old: Pin | None
    new: Pin | None
    old_problems: tuple[str, ...]
    new_problems: tuple[str, ...]

    def key(self) -> tuple[str | None, str | None]:
        return (self.old.key if self.old else None, self.new.key if self.new else None)

    def shown(self) -> str:
        old = f"{self.old.side} ({self.old.location})" if self.old else "no torch"
        new = f"{self.new.side} ({self.new.location})" if self.new else "no torch"
        return f"{self.environment}: {old} -> {new}"


def environments(
    base: Sequence[Pin], head: Sequence[Pin], effective: EffectivePin
) -> list[EnvironmentMove]:
    """Every environment that pins torch on either side, with its torch on each (moved or not)."""
    torch = [p for p in [*base, *head] if p.package == "torch"]
    parted = _parted(torch)
    names = sorted({_name(p, parted) for p in torch})
    found = []
    for name in names:
        was, old_problems = effective([p for p in base if _name(p, parted) == name], "torch")
        now, new_problems = effective([p for p in head if _name(p, parted) == name], "torch")
        found.append(EnvironmentMove(name, was, now, tuple(old_problems), tuple(new_problems)))
    return found


def moved_environments(
    base: Sequence[Pin], head: Sequence[Pin], effective: EffectivePin
) -> tuple[int, list[EnvironmentMove]]:
    """(how many environments pin torch on either side, those whose torch moved)."""
    found = environments(base, head, effective)
    return len(found), [m for m in found if m.key()[0] != m.key()[1]]


def agreed(moves: Sequence[EnvironmentMove]) -> EnvironmentMove | None:
    """The one move every moved environment made; None when they moved differently. Ranges that
    moved to make room for the one exact move (`torch>=2.1,<2.9` to `<2.10` beside `torch==2.8.0`
    to `==2.9.0`), admitting its from on the base and its to on the head, are that move too."""
    exact = [m for m in moves if _exact(m)]
    if exact and len({m.key() for m in exact}) == 1:
        one = exact[0]
        if all(_makes_room(m, one) for m in moves if not _exact(m)):
            return one
    keys = {m.key() for m in moves}
    return moves[0] if len(keys) == 1 else None


def _exact(move: EnvironmentMove) -> bool:
    return all(pin is None or pin.exact for pin in (move.old, move.new))


def _makes_room(move: EnvironmentMove, exact: EnvironmentMove) -> bool:
    """Whether a moved range admits the exact move's from on the base and its to on the head."""
    pairs = ((move.old, exact.old), (move.new, exact.new))
    for rng, pin in pairs:
        if rng is None or pin is None or pin.version is None or rng.url:
            return False
        if not SpecifierSet(rng.specifier).contains(pin.version.split("+", 1)[0], prereleases=True):
            return False
    return True
