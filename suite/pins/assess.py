"""Torch pin-bump detection: torch pins wherever teams keep them, two git refs compared.

One file's pins come from suite/pins/files.py (requirements/constraints, pyproject.toml) and
suite/pins/formats.py (lock files of uv, poetry, pdm, Pipfile and PEP 751, conda environments,
pixi manifests and locks, Dockerfiles); one side's files from suite/pins/refs.py (a git ref,
symlinks followed inside the repository) or suite/pins/tree.py (texts in memory), the files pip
includes with -r/-c counted as pins of the file that includes them. Here: which torch each side
installs (a lock's exact version wins over a range; files that disagree are named), and what
moved.

Fail closed: a pin-bearing file that changed and cannot be read, a moved range with no lock, or
files that disagree make the answer `unknown` (the matrix runs), never "no torch change". That
answer is given only when every changed pin-bearing file was read and none moved torch.

A pin becomes a side for `ab` (`torch==2.14.1`): markers are dropped because a side is one
interpreter, and the index a pin installs from is recorded beside it, not folded into it.
torchvision, torchaudio and triton are read too and reported beside torch.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from urllib.parse import unquote, urlsplit

from packaging.specifiers import SpecifierSet

from suite.core.errors import InputError
from suite.pins.environments import EnvironmentMove, agreed, environments, moved_environments
from suite.pins.files import Pin, pin_file_kind, pins_in_file
from suite.pins.formats import TRACKED, Unreadable
from suite.pins.refs import MAX_FILE_BYTES, files_at_ref, tree_at_ref
from suite.pins.scan import Changed, texts_changes, unexplained
from suite.pins.scan import reason as scan_reason
from suite.pins.tree import Tree, tree_of
from suite.untrusted.git import GIT_TIMEOUT_S
from suite.untrusted.shown import shown

__all__ = [
    "GIT_TIMEOUT_S",
    "MAX_FILE_BYTES",
    "Assessment",
    "Pin",
    "Tree",
    "assess",
    "files_at_ref",
    "pin_file_kind",
    "pins_in_file",
    "tree_at_ref",
    "tree_of",
]


@dataclass(frozen=True)
class Unknown:
    """A reason the torch pin cannot be told: a file, the side it is on, why."""

    file: str
    side: str  # "base" or "head"
    reason: str

    def as_dict(self) -> dict[str, str]:
        return {"file": self.file, "side": self.side, "reason": self.reason}


@dataclass(frozen=True)
class Assessment:
    status: str  # "changed", "unknown" or "unchanged"
    baseline: str | None  # the side `ab` takes: torch==2.13.0; None when the side has no pin
    candidate: str | None
    files: tuple[str, ...]  # files whose torch pins differ between the sides
    baseline_pin: Pin | None
    candidate_pin: Pin | None
    unknown: tuple[Unknown, ...] = ()
    disagreements: tuple[str, ...] = ()
    companions: tuple[tuple[str, str | None, str | None], ...] = ()  # (package, old, new) moved
    # Every index URL the base side's pins install from, any file, any package: the hosts a
    # pull request may not add to by itself (suite/pins/index_hosts.py).
    base_index_urls: tuple[str, ...] = ()
    # Each environment that pins torch (suite/pins/environments.py), with its pin on each side.
    environment_moves: tuple[EnvironmentMove, ...] = ()

    @property
    def environments(self) -> tuple[tuple[str, str | None, str | None], ...]:
        """(environment, baseline side, candidate side) of every environment."""
        return tuple(
            (e.environment, e.old.side if e.old else None, e.new.side if e.new else None)
            for e in self.environment_moves
        )

    @property
    def run(self) -> bool:
        """Whether the matrix must run: torch moved, or it cannot be told that it did not."""
        return self.status != "unchanged"

    @property
    def message(self) -> str:
        # File names are the head's to choose: shown() makes each one printable line.
        where = ", ".join(shown(f) for f in self.files)
        if self.status == "unknown":
            why = "; ".join(f"{shown(u.file)} ({u.side}): {u.reason}" for u in self.unknown)
            text = f"torch pin unknown: {why}"
        elif self.status == "unchanged":
            text = "no torch change"
        elif self.baseline is None:
            text = f"torch pin added: {self.candidate} (no baseline pin) in {where}"
        elif self.candidate is None:
            text = f"torch pin removed: {self.baseline} (no candidate pin) in {where}"
        else:
            text = f"torch pin changed: {self.baseline} -> {self.candidate} in {where}"
        moved = [
            f"{old or f'no {pkg}'} -> {new or f'no {pkg}'}" for pkg, old, new in self.companions
        ]
        return text + (f"; also {', '.join(moved)}" if moved else "")


def _file_pins(tree: Tree, path: str) -> list[Pin]:
    """A file's pins, and those of the files it includes as pins of the file (pip installs them
    when it installs the file). Raises Unreadable."""
    pins = pins_in_file(path, tree.texts[path], kind=tree.kinds.get(path))
    for included in tree.includes.get(path, ()):
        try:
            found = pins_in_file(included, tree.sources[included], kind="requirements")
        except Unreadable as exc:
            raise Unreadable(f"{included}, which it includes: {exc}") from None
        pins += [replace(p, file=path, included=included) for p in found]
    return pins


def read_tree(tree: Tree) -> tuple[list[Pin], dict[str, str]]:
    """Every tracked pin of a side, and the files that could not be read (path -> why)."""
    pins: list[Pin] = []
    unreadable = dict(tree.unread)
    for path in sorted(tree.texts):
        try:
            pins += _file_pins(tree, path)
        except Unreadable as exc:
            unreadable[path] = str(exc)
    return pins, unreadable


def find_torch_pins(files: Mapping[str, str]) -> list[Pin]:
    """Tracked pins in every file that may hold one, in path order; other files are ignored.
    A file that cannot be read raises InputError naming it."""
    pins = []
    for path in sorted(files):
        try:
            pins += pins_in_file(path, files[path])
        except Unreadable as exc:
            raise InputError(str(exc), file=path) from None
    return pins


def _public(pin: Pin) -> str:
    """The version without its local label (+cpu); a wheel URL's is its file's version (the
    wheels of one torch for each Python are one version), any other URL is its own."""
    if pin.url:
        file = unquote(urlsplit(pin.url).path.rsplit("/", 1)[-1])
        parts = file.split("-")
        return (
            f"=={parts[1].split('+', 1)[0]}"
            if file.endswith(".whl") and len(parts) >= 5
            else pin.key
        )
    return pin.key.split("+", 1)[0]


def _same_torch(a: Pin, b: Pin) -> bool:
    """PEP 440: ==2.7.0 admits 2.7.0+cu128, so two exact pins that differ only in that one has
    a local label and the other none install the same torch."""
    if a.version is None or b.version is None or a.url or b.url:
        return False
    labels = ("+" in a.version, "+" in b.version)
    return a.version.split("+", 1)[0] == b.version.split("+", 1)[0] and not all(labels)


def _describe(pin: Pin) -> str:
    return f"{pin.location} has {pin.side!r}"


def effective_pin(pins: Sequence[Pin], package: str = "torch") -> tuple[Pin | None, list[str]]:
    """The one version of a package a side installs, and how its files disagree.

    A lock's exact version wins over a manifest's; an exact pin wins over a range (a lock
    beside a range in pyproject.toml). Variants of one version in one lock (+cpu, +cu128 for
    different platforms) are one version.
    """
    own = [p for p in pins if p.package == package]
    exact = [p for p in own if p.exact]
    chosen = [p for p in exact if p.kind == "lock"] or exact or own
    if not chosen:
        return None, []
    first, problems = chosen[0], []
    for other in exact:
        same_file = other.file == first.file and _public(other) == _public(first)
        if other.key != first.key and not same_file and not _same_torch(first, other):
            problems.append(f"{_describe(first)} but {_describe(other)}")
    if first.exact and first.version is not None:
        for other in own:
            admits = (
                other.exact
                or other.url
                or SpecifierSet(other.specifier).contains(first.version, prereleases=True)
            )
            if not admits:
                problems.append(
                    f"{_describe(other)}, which excludes {first.side} from {first.file}"
                )
    elif not first.exact:
        for other in own[1:]:
            if other.key != first.key:
                problems.append(f"{_describe(first)} but {_describe(other)}")
    return first, problems


def _keys_by_file(pins: Sequence[Pin], package: str) -> dict[str, set[str]]:
    """File -> the keys of its pins; an included file's pins count for it and for the file that
    includes it, so that an answer names both."""
    by_file: dict[str, set[str]] = {}
    for pin in pins:
        if pin.package == package:
            for file in (pin.file, pin.included):
                if file is not None:
                    by_file.setdefault(file, set()).add(pin.key)
    return by_file


def _by_environment(
    base_pins: Sequence[Pin],
    head_pins: Sequence[Pin],
    files: Sequence[str],
    overall: tuple[Pin | None, Pin | None, list[str], list[str]],
    unknown: list[Unknown],
) -> tuple[Pin | None, Pin | None, list[str], list[str]]:
    """What moved, told by the environments that moved when there are several
    (suite/pins/environments.py): their one from -> to and their own problems, else the
    repository's as one (overall); environments that moved differently are unknown."""
    count, moves = moved_environments(base_pins, head_pins, effective_pin)
    if count <= 1 or not moves:
        return overall
    one = agreed(moves)
    if one is not None:
        old_problems = [p for m in moves for p in m.old_problems]
        new_problems = [p for m in moves for p in m.new_problems]
        return one.old, one.new, old_problems, new_problems
    # Said instead of the repository's disagreements, which are on purpose across environments.
    shown = "; ".join(m.shown() for m in moves)
    unknown.append(
        Unknown(files[0] if files else moves[0].environment, "head",
                f"environments moved differently ({shown}): which one a backend's job "
                "uses cannot be told from the pins")
    )  # fmt: skip
    return overall[0], overall[1], [], []


def assess(
    base: Tree, head: Tree, changes: Sequence[Changed] | None = None, unscanned: str | None = None
) -> Assessment:
    """Did the change move torch (and what moved with it), or can that not be told?

    changes: the lines the change adds and removes in every file (suite/pins/scan.py); each
    that could move torch and that no reader explains makes the answer unknown. unscanned: why
    the change could not be scanned (then the answer is unknown)."""
    changed = {p for p in base.ids.keys() | head.ids.keys() if base.ids.get(p) != head.ids.get(p)}
    base_pins, base_bad = read_tree(base)
    head_pins, head_bad = read_tree(head)
    unknown = [
        Unknown(path, side, reason)
        for side, bad in (("base", base_bad), ("head", head_bad))
        for path, reason in sorted(bad.items())
        if path in changed and not _unread_alike(path, base_bad, head_bad)
    ]
    if unscanned:
        unknown.append(Unknown("*", "head", unscanned))
    if changes:
        read = {"base": _read_files(base, base_bad), "head": _read_files(head, head_bad)}
        aliases = {"base": base.aliases, "head": head.aliases}
        found = unexplained(changes, {"base": base_pins, "head": head_pins}, read, aliases)
        already = {(u.file, u.side) for u in unknown}  # a reader said why already
        unknown += _scan_unknowns([c for c in found if (c.path, c.side) not in already])
    old, old_problems = effective_pin(base_pins, "torch")
    new, new_problems = effective_pin(head_pins, "torch")
    a, b = _keys_by_file(base_pins, "torch"), _keys_by_file(head_pins, "torch")
    files = tuple(sorted(f for f in a.keys() | b.keys() if a.get(f) != b.get(f)))
    old, new, old_problems, new_problems = _by_environment(
        base_pins, head_pins, files, (old, new, old_problems, new_problems), unknown
    )
    moved = (old.key if old else None) != (new.key if new else None)
    disagreements = [f"base: {p}" for p in old_problems] + [f"head: {p}" for p in new_problems]
    if files:
        # A torch pin changed somewhere: what the side installs must be clear on both sides.
        unknown += [Unknown(f, "base", p) for p in old_problems for f in files[:1]]
        unknown += [Unknown(f, "head", p) for p in new_problems for f in files[:1]]
    if moved:
        for side, pin in (("base", old), ("head", new)):
            if pin is not None and not pin.exact:
                unknown.append(
                    Unknown(
                        pin.file,
                        side,
                        f"{pin.side!r} is a range with no lock: which torch installs depends on "
                        "the index on the day",
                    )
                )
    companions = []
    for package in TRACKED[1:]:
        was, _ = effective_pin(base_pins, package)
        now, _ = effective_pin(head_pins, package)
        if (was.key if was else None) != (now.key if now else None):
            companions.append((package, was.side if was else None, now.side if now else None))
    status = "unknown" if unknown else "changed" if moved else "unchanged"
    return Assessment(
        status=status,
        baseline=old.side if old else None,
        candidate=new.side if new else None,
        files=files,
        baseline_pin=old,
        candidate_pin=new,
        unknown=tuple(unknown),
        disagreements=tuple(disagreements),
        companions=tuple(companions),
        base_index_urls=_index_urls(base_pins),
        environment_moves=tuple(environments(base_pins, head_pins, effective_pin)),
    )


# The reasons a line-by-line reader gives for a torch word whose variable has no value in the
# file (a build argument given on the command line, a workflow input).
_NO_VALUE = re.compile(r"has no (?:ARG default or ENV value|value this file gives)")


def _unread_alike(path: str, base_bad: Mapping[str, str], head_bad: Mapping[str, str]) -> bool:
    """Whether a Dockerfile or workflow is unreadable on both sides for the same reason, a torch
    word with a variable the file gives no value: the torch it installs then depends on the same
    outside value on both sides, and the scan answers for every changed line (the file is not
    read, so each that could move torch is unexplained)."""
    old, new = base_bad.get(path), head_bad.get(path)
    if old is None or new is None or pin_file_kind(path) not in ("dockerfile", "workflow"):
        return False
    strip = re.compile(r"\bline \d+")
    return bool(_NO_VALUE.search(old)) and strip.sub("", old) == strip.sub("", new)


def _read_files(tree: Tree, bad: Mapping[str, str]) -> set[str]:
    """The files of a side that a reader read whole: pin files without an error, and what
    their includes reached."""
    named = {p for p in tree.texts if tree.kinds.get(p) or pin_file_kind(p)}
    return (named | set(tree.sources)) - set(bad)


def _scan_unknowns(found: Sequence[Changed]) -> list[Unknown]:
    """One reason per file and side: its first unexplained line, and how many more."""
    grouped: dict[tuple[str, str], list[Changed]] = {}
    for change in found:
        grouped.setdefault((change.path, change.side), []).append(change)
    out = []
    for (path, side), lines in grouped.items():
        more = f" (and {len(lines) - 1} more such lines)" if len(lines) > 1 else ""
        out.append(Unknown(path, side, scan_reason(lines[0]) + more))
    return out


def _index_urls(pins: Sequence[Pin]) -> tuple[str, ...]:
    urls = ((*((p.index_url,) if p.index_url else ()), *p.extra_index_urls) for p in pins)
    return tuple(dict.fromkeys(u for some in urls for u in some))


def detect_bump(base: Mapping[str, str], head: Mapping[str, str]) -> Assessment | None:
    """The assessment of two trees (path -> text); None when no torch pin changed and every
    changed file was read."""
    result = assess(tree_of(base), tree_of(head), texts_changes(base, head))
    return None if result.status == "unchanged" else result
