"""One side of a change as it is at a git ref: the files that may pin torch, read by object id,
with symlinks followed inside the repository.

A pin file may be a symlink (`uv.lock -> locks/linux.lock`): it is read as its target at that ref,
and its content id is the target's, so that a change of only the target is a change of the link.
A link that leaves the repository, points to nothing at that ref or loops is not read, and says
so: pip would read something this tree does not hold.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from suite.core.errors import InputError
from suite.pins.files import pin_file_kind
from suite.pins.includes import Blob
from suite.pins.tree import Tree, build_tree
from suite.untrusted.git import run_git

# Lock files of large projects run to megabytes; a pin-bearing file above this is not read,
# and when it changed the answer is `unknown`.
MAX_FILE_BYTES = 32 << 20
# And all of one ref's pin files together: a head of many large pin files is read this far, and
# a file past it is not read (unknown when it changed), never a memory or time sink.
MAX_TOTAL_BYTES = 256 << 20
# As many links as Linux follows in one path before it answers ELOOP.
MAX_SYMLINKS = 40
_LINK_MODE = "120000"


@dataclass(frozen=True)
class _Entry:
    mode: str
    kind: str  # "blob", or "commit" for a submodule
    obj: str
    size: int | None


class _LinkProblem(Exception):
    """A symlink on the way to a file that cannot be followed; the message says why."""


def _git(repo: Path, args: Sequence[str], ref: str) -> bytes:
    return run_git(repo, args, f"git ref {ref!r}")


def _entries(listing: bytes) -> dict[str, _Entry]:
    """`git ls-tree -r -l -z` output as path -> entry."""
    entries = {}
    for entry in listing.decode("utf-8", "surrogateescape").split("\0"):
        meta, _, path = entry.partition("\t")
        if path:
            mode, kind, obj, size = meta.split()
            entries[path] = _Entry(mode, kind, obj, int(size) if size.isdigit() else None)
    return entries


class _RefReader:
    """Reads files of one ref by path, following symlinks the way the filesystem would."""

    def __init__(self, repo: Path, ref: str, entries: dict[str, _Entry]) -> None:
        self._repo, self._ref, self._entries = repo, ref, entries
        self._blobs: dict[str, bytes] = {}
        self._read = 0

    def _blob(self, obj: str) -> bytes:
        if obj not in self._blobs:
            # By object id, so that no path is ever read as a revision or an option.
            self._blobs[obj] = _git(self._repo, ["cat-file", "blob", obj], self._ref)
        return self._blobs[obj]

    def _resolve(self, path: str) -> tuple[str, bool]:
        """The path of the file `path` names, links in any of its parts followed, and whether a
        link was followed. Raises _LinkProblem for a link that cannot be followed."""
        done: list[str] = []
        todo = path.split("/")
        hops, target = 0, path
        while todo:
            part = todo.pop(0)
            if part in ("", "."):
                continue
            if part == "..":
                if not done:
                    raise _LinkProblem(f"a symlink pointing outside the repository ({target!r})")
                done.pop()
                continue
            entry = self._entries.get("/".join([*done, part]))
            if entry is None or entry.mode != _LINK_MODE:
                done.append(part)
                continue
            hops += 1
            target = self._blob(entry.obj).decode("utf-8", "surrogateescape")
            if hops > MAX_SYMLINKS:
                raise _LinkProblem(f"a chain of more than {MAX_SYMLINKS} symlinks (a loop?)")
            if target.startswith("/"):
                raise _LinkProblem(f"a symlink pointing outside the repository ({target!r})")
            todo = target.split("/") + todo
        return "/".join(done), hops > 0

    def __call__(self, path: str) -> Blob | None:
        try:
            real, linked = self._resolve(path)
        except _LinkProblem as exc:
            return Blob(f"symlink: {exc}", None, f"{exc}: not read")
        entry = self._entries.get(real)
        if entry is None or entry.kind != "blob":
            if not linked:
                return None
            why = f"a symlink pointing to nothing at this ref ({real!r}): not read"
            return Blob(f"symlink: {why}", None, why)
        if entry.size is not None and entry.size > MAX_FILE_BYTES:
            why = f"{entry.size >> 20} MiB, above the {MAX_FILE_BYTES >> 20} MiB read limit"
            return Blob(entry.obj, None, why)
        if entry.obj not in self._blobs:
            self._read += entry.size or 0
            if self._read > MAX_TOTAL_BYTES:
                why = f"past the {MAX_TOTAL_BYTES >> 20} MiB read for all pin files of one ref"
                return Blob(entry.obj, None, why)
        text = self._blob(entry.obj).decode("utf-8-sig", "replace")
        return Blob(entry.obj, text, real=real if linked else None)


def tree_at_ref(repo: Path, ref: str) -> Tree:
    """The files that may pin torch as they are at a git ref, by path from the repository root."""
    if not ref or ref.startswith("-"):
        raise InputError(f"cannot read git ref {ref!r}: not a ref", file=str(repo))
    entries = _entries(_git(repo, ["ls-tree", "-r", "-l", "-z", "--full-tree", ref], ref))
    # Submodules are commits, not files; a symlink is read as the file it points to.
    paths = [p for p, e in entries.items() if e.kind == "blob" and pin_file_kind(p) is not None]
    return build_tree(paths, _RefReader(repo, ref, entries))


def files_at_ref(repo: Path, ref: str) -> dict[str, str]:
    """The texts of the files that may pin torch at a git ref (see tree_at_ref)."""
    return tree_at_ref(repo, ref).texts
