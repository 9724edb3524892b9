"""A pull request's commits, read with git as data: which files a change touches and what they
hold, by object id.

Git is steered by what it reads unless told not to. A head's `.gitattributes` can mark every
file binary (`* -diff`: `git diff` then prints "Binary files differ" where an install line was
added), name a textconv or an external diff driver, and `git diff` quotes file names it finds
odd (`"ci\\"install.sh"`) in a way a reader must undo. So nothing here runs `git diff`: the
changed files come from `git diff-tree -r -z` (trees compared by object id: no attributes, no
drivers, no content heuristics; names NUL-separated, taken byte for byte) and their contents from
`git cat-file --batch`. Git runs without the system attribute file, with no attribute file of
the user's, without replace objects and without a prompt.

What cannot be read whole (a file or a change above the caps, more files than MAX_FILES) is
returned as a reason, which the callers turn into `unknown`.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from suite.core.errors import EnvironmentProblem, InputError
from suite.untrusted.shown import shown

GIT_TIMEOUT_S = 60.0
MAX_FILE_BYTES = 32 << 20  # one file's content, either side
MAX_TOTAL_BYTES = 256 << 20  # every changed file's content, both sides together
MAX_FILES = 50_000  # changed files in one change
_SUBMODULE = "160000"
_NULL = "0" * 40
# Settings no tree can override: attributes are read from the tree only by commands that look
# at a work tree or at file contents, which none here does, and these close the rest.
_HARDENED = (
    "-c", "core.attributesFile=/dev/null",
    "-c", "diff.external=",
    "-c", "core.quotePath=false",
    "--no-replace-objects",
)  # fmt: skip
_ENV = {"GIT_ATTR_NOSYSTEM": "1", "GIT_TERMINAL_PROMPT": "0", "GIT_OPTIONAL_LOCKS": "0"}


@dataclass(frozen=True)
class ChangedFile:
    """A file a change touches. path: as git stores it, decoded with surrogateescape (bytes that
    are not UTF-8 survive); old/new: its object on each side (None where it does not exist);
    a submodule's object is a commit, and its content is the line `git diff` would show."""

    path: str
    old_mode: str
    new_mode: str
    old: str | None
    new: str | None


@dataclass(frozen=True)
class ReadChange:
    """A change's files with their contents (None on a side where the file does not exist), or
    the reason it could not be read whole."""

    files: tuple[tuple[ChangedFile, bytes | None, bytes | None], ...]
    unread: str | None = None


def run_git(repo: Path, args: Sequence[str], what: str, stdin: bytes | None = None) -> bytes:
    """git with the hardened settings; what: the thing being read, for the error message."""
    argv = ["git", "-C", str(repo), *_HARDENED, *args]
    try:
        proc = subprocess.run(
            argv, input=stdin, capture_output=True, timeout=GIT_TIMEOUT_S, check=False,
            env={**os.environ, **_ENV},
        )  # fmt: skip
    except FileNotFoundError:
        raise EnvironmentProblem("git is not installed (needed to read --base/--head)") from None
    except subprocess.TimeoutExpired:
        why = f"git {args[0]} timed out after {GIT_TIMEOUT_S:.0f}s"
        raise InputError(f"cannot read {what}: {why}", file=str(repo)) from None
    if proc.returncode != 0:
        why = proc.stderr.decode("utf-8", "replace").strip() or f"git exited {proc.returncode}"
        raise InputError(f"cannot read {what}: {why}", file=str(repo))
    return proc.stdout


def checked_ref(repo: Path, ref: str) -> str:
    """The commit a ref names, as a full object id; a ref that git could take as an option, or
    that names no commit, is an input error."""
    if not ref or ref.startswith("-"):
        raise InputError(f"cannot read git ref {ref!r}: not a ref", file=str(repo))
    out = run_git(
        repo, ["rev-parse", "--verify", "--end-of-options", f"{ref}^{{commit}}"], f"git ref {ref!r}"
    )
    return out.decode("ascii", "replace").strip()


def changed_files(repo: Path, base: str, head: str) -> list[ChangedFile]:
    """The files that differ between two commits, renames as a delete and an add."""
    old, new = checked_ref(repo, base), checked_ref(repo, head)
    raw = run_git(
        repo, ["diff-tree", "-r", "-z", "--no-renames", "--no-abbrev", old, new],
        f"the change {base!r}..{head!r}",
    )  # fmt: skip
    fields = raw.split(b"\0")
    out: list[ChangedFile] = []
    for meta, name in zip(fields[0::2], fields[1::2], strict=False):
        if not meta.startswith(b":"):
            continue
        old_mode, new_mode, old_id, new_id, _status = meta[1:].decode("ascii").split(" ")
        out.append(
            ChangedFile(
                name.decode("utf-8", "surrogateescape"), old_mode, new_mode,
                None if old_id == _NULL else old_id, None if new_id == _NULL else new_id,
            )
        )  # fmt: skip
    return out


def _sizes(repo: Path, ids: Sequence[str]) -> dict[str, int]:
    """Object id -> size, for the blobs among ids."""
    if not ids:
        return {}
    out = run_git(
        repo, ["cat-file", "--batch-check=%(objectname) %(objecttype) %(objectsize)"],
        "object sizes", stdin="".join(f"{i}\n" for i in ids).encode(),
    )  # fmt: skip
    sizes = {}
    for line in out.decode("ascii", "replace").splitlines():
        parts = line.split(" ")
        if len(parts) == 3 and parts[1] == "blob" and parts[2].isdigit():
            sizes[parts[0]] = int(parts[2])
    return sizes


def read_blobs(repo: Path, ids: Sequence[str]) -> dict[str, bytes]:
    """The contents of blobs by object id (`git cat-file --batch`); the caller checked sizes."""
    wanted = list(dict.fromkeys(ids))
    if not wanted:
        return {}
    out = run_git(
        repo, ["cat-file", "--batch"], "file contents",
        stdin="".join(f"{i}\n" for i in wanted).encode(),
    )  # fmt: skip
    blobs: dict[str, bytes] = {}
    at = 0
    while at < len(out):
        end = out.index(b"\n", at)
        header = out[at:end].decode("ascii", "replace").split(" ")
        at = end + 1
        if len(header) != 3 or not header[2].isdigit():
            continue  # "<id> missing"
        size = int(header[2])
        blobs[header[0]] = out[at : at + size]
        at += size + 1
    return blobs


def _too_big(files: Sequence[ChangedFile], sizes: dict[str, int]) -> str | None:
    total = 0
    for changed in files:
        for obj in (changed.old, changed.new):
            size = sizes.get(obj or "", 0)
            if size > MAX_FILE_BYTES:
                return (
                    f"{shown(changed.path)} is {size >> 20} MiB, above the "
                    f"{MAX_FILE_BYTES >> 20} MiB a file is read to: the change was not scanned"
                )
            total += size
    if total > MAX_TOTAL_BYTES:
        return (
            f"the changed files hold {total >> 20} MiB, above the {MAX_TOTAL_BYTES >> 20} MiB "
            "read for one change: the change was not scanned"
        )
    return None


def read_change(repo: Path, base: str, head: str) -> ReadChange:
    """Every file that differs between two commits, with its content on each side."""
    files = changed_files(repo, base, head)
    if len(files) > MAX_FILES:
        return ReadChange((), f"{len(files)} files changed, above {MAX_FILES}: not scanned")
    blob_ids = [
        obj
        for f in files
        for obj, mode in ((f.old, f.old_mode), (f.new, f.new_mode))
        if obj and mode != _SUBMODULE
    ]
    sizes = _sizes(repo, blob_ids)
    unread = _too_big(files, sizes)
    if unread is not None:
        return ReadChange((), unread)
    blobs = read_blobs(repo, blob_ids)
    lost = set(blob_ids) - blobs.keys()
    missing = [f.path for f in files if {f.old, f.new} & lost]
    if missing:
        return ReadChange((), f"{shown(missing[0])} could not be read from git: not scanned")

    def content(obj: str | None, mode: str) -> bytes | None:
        if obj is None:
            return None
        if mode == _SUBMODULE:
            return f"Subproject commit {obj}\n".encode()
        return blobs[obj]

    return ReadChange(
        tuple((f, content(f.old, f.old_mode), content(f.new, f.new_mode)) for f in files)
    )
