"""pip's includes: the files a requirements file pulls in with -r/--requirement and
-c/--constraint, followed at the same side as pip follows them (a path relative to the including
file's folder, includes of includes too), so that a torch pin moved only in an included file is a
pin of the file that includes it.

An include that cannot be followed (a URL, a path outside the repository, a file missing on that
side, a loop, which pip refuses) makes the including file unreadable: its torch cannot be told.
"""

from __future__ import annotations

import posixpath
import re
import shlex
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from suite.pins.files import logical_lines
from suite.pins.formats import Unreadable

# Deeper than any real layout of requirement files; a bound, not a limit anyone should meet.
MAX_INCLUDE_DEPTH = 32
_OPTIONS = {"-r": "-r", "--requirement": "-r", "-c": "-c", "--constraint": "-c"}
_SCHEME = re.compile(r"^[a-z][a-z0-9+.-]*:", re.I)


@dataclass(frozen=True)
class Blob:
    """A file as one side holds it: a content id (equal ids, equal text) and its text, or why
    it was not read."""

    id: str
    text: str | None
    problem: str = ""
    real: str | None = None  # the path it was read at, when a symlink led there


# path -> the file on that side; None when the side has no such file.
Reader = Callable[[str], "Blob | None"]


@dataclass(frozen=True)
class Followed:
    """What pip reads through a file's includes: each included file once, in pip's order, and
    why the rest cannot be read (None when every include was read)."""

    files: tuple[tuple[str, Blob], ...]
    problem: str | None


def _directive(line: str) -> tuple[str, str] | None:
    """(-r or -c, the path) of an include line: `-r x`, `-rx`, `--requirement=x`, `-c x`."""
    try:
        words = shlex.split(line)
    except ValueError:
        words = line.split()
    first = words[0] if words else ""
    option, eq, value = first.partition("=")
    if option in _OPTIONS and option.startswith("--") and eq:
        return _OPTIONS[option], value
    if first in _OPTIONS:
        return (_OPTIONS[first], words[1]) if len(words) > 1 else None
    if first[:2] in ("-r", "-c") and not first.startswith("--"):
        return first[:2], first[2:]
    return None


def includes(text: str) -> Iterator[tuple[int, str, str]]:
    """(line, -r or -c, path as written) of every include of a requirements file."""
    for number, line in logical_lines(text):
        found = _directive(line) if line.startswith("-") else None
        if found is not None:
            yield number, *found


def _included_path(including: str, target: str, where: str) -> str:
    """The path from the repository root that pip opens for an include, or Unreadable."""
    if _SCHEME.match(target):
        raise Unreadable(f"{where}: includes a URL, which is not read")
    if "${" in target:
        raise Unreadable(f"{where}: the path names an environment variable, which is not known")
    joined = posixpath.normpath(posixpath.join(posixpath.dirname(including), target))
    if target.startswith("/") or joined == ".." or joined.startswith("../"):
        raise Unreadable(f"{where}: the path leaves the repository, so it is not read")
    return joined


def _walk(
    path: str, text: str, read: Reader, chain: tuple[str, ...], seen: dict[str, Blob]
) -> None:
    for number, option, target in includes(text):
        where = f"{option} {target} on line {number}" + (f" of {path}" if len(chain) > 1 else "")
        included = _included_path(path, target, where)
        if included in chain:
            loop = " -> ".join([*chain, included])
            raise Unreadable(f"{where}: the includes form a loop ({loop}), which pip refuses")
        if included in seen:
            continue  # reached twice without a loop (a diamond): its pins are counted once
        if len(chain) > MAX_INCLUDE_DEPTH:
            raise Unreadable(f"{where}: includes nest deeper than {MAX_INCLUDE_DEPTH} files")
        blob = read(included)
        if blob is None:
            raise Unreadable(f"{where}: {included} does not exist on this side")
        if blob.text is None:
            raise Unreadable(f"{where}: {included} is {blob.problem}")
        seen[included] = blob
        _walk(included, blob.text, read, (*chain, included), seen)


def follow_includes(path: str, text: str, read: Reader) -> Followed:
    """The files pip reads through the includes of the requirements file `path` (text), each
    read with `read`; the first include that cannot be followed ends the walk."""
    seen: dict[str, Blob] = {}
    try:
        _walk(path, text, read, (path,), seen)
    except Unreadable as exc:
        return Followed(tuple(seen.items()), str(exc))
    return Followed(tuple(seen.items()), None)
