"""One side's pin-bearing files as a Tree, built through a reader of that side (a git ref in
suite/pins/refs.py, or texts held in memory): each file's text and content id, the files pip
reaches through its -r/-c includes, and the files that could not be read, with why.

A file's content id covers what it includes, so that a torch pin moved only in an included file
(or an include that stops being readable) is a change of the including file.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from suite.pins.files import pin_file_kind
from suite.pins.includes import Blob, Reader, follow_includes


@dataclass(frozen=True)
class Tree:
    """The pin-bearing files of one side: path -> text, path -> content id, and the files that
    were not read (path -> why)."""

    texts: dict[str, str]
    ids: dict[str, str]
    unread: dict[str, str]
    kinds: dict[str, str] = field(default_factory=dict)  # format overrides, for single files
    # A requirements file -> the files its -r/-c includes reach, in pip's order, each once.
    includes: dict[str, tuple[str, ...]] = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict)  # included path -> its text
    # A file read through a symlink: the path it was read at -> the link's path.
    aliases: dict[str, str] = field(default_factory=dict)


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()


def build_tree(paths: Iterable[str], read: Reader, kinds: Mapping[str, str] | None = None) -> Tree:
    """The Tree of the files at `paths` as `read` gives them, requirements includes followed."""
    tree = Tree({}, {}, {}, dict(kinds or {}))
    for path in sorted(paths):
        blob = read(path)
        if blob is None:
            continue
        tree.ids[path] = blob.id
        if blob.real is not None:
            tree.aliases[blob.real] = path
        if blob.text is None:
            tree.unread[path] = blob.problem
            continue
        if (tree.kinds.get(path) or pin_file_kind(path)) != "requirements":
            tree.texts[path] = blob.text
            continue
        followed = follow_includes(path, blob.text, read)
        if followed.files or followed.problem:
            parts = [blob.id, *(f"{p} {b.id}" for p, b in followed.files), followed.problem or ""]
            tree.ids[path] = _digest("\n".join(parts))
        if followed.problem is not None:
            tree.unread[path] = followed.problem
            continue
        tree.texts[path] = blob.text
        if followed.files:
            tree.includes[path] = tuple(p for p, _ in followed.files)
        tree.sources.update((p, b.text) for p, b in followed.files if b.text is not None)
    return tree


def tree_of(files: Mapping[str, str], kinds: Mapping[str, str] | None = None) -> Tree:
    """A Tree of texts held in memory (path -> text); includes are looked up among them."""

    def read(path: str) -> Blob | None:
        text = files.get(path)
        return None if text is None else Blob(_digest(text), text)

    return build_tree(files, read, kinds)
