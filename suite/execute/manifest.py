"""What a cached venv held when it was built, and the check before each reuse that it still holds
exactly that: every file's sha256, every symlink's target, every folder, by path in the venv.

A venv side runs a pull request's workloads inside the venv, so the code under test can write
into it; a later job reusing the venv would then measure a patched torch as its baseline. The
manifest is written once pip has finished and is kept beside the venv, not inside it, so that
nothing the venv's own interpreter is pointed at rewrites it by accident. A process of the same
user can still rewrite both the venv and its manifest: only a runner that starts empty for each
job (an ephemeral runner) removes that, which is why the README recommends one.

The rule is strict: any file added, missing or changed, bytecode included, is a difference. pip
compiles every module it installs, so a worker finds its bytecode already there and writes none;
a new .pyc could shadow its source (a newer timestamp wins), and a new empty folder can make an
`import` of an absent package succeed as a namespace package, so neither is ignored.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from suite.core.results import atomic_write_json

KIND = "torch-matrix/venv-manifest"
SCHEMA_VERSION = 1
HASH = "sha256"  # with the CPU's SHA instructions, faster than blake2b on a torch venv
SHOWN = 3  # how many differences a message names
_HASH_THREADS = min(8, os.cpu_count() or 1)

Entries = dict[str, str]


def manifest_path(venv: Path) -> Path:
    """Beside the venv, outside it: <venv>.manifest.json."""
    return venv.parent / f"{venv.name}.manifest.json"


def file_digest(path: str | Path) -> str:
    """sha256:… of a file's bytes, read in large blocks (hashlib hashes those without the GIL,
    so threads hash files side by side)."""
    with open(path, "rb") as fh:
        if sys.version_info >= (3, 11):
            return f"{HASH}:{hashlib.file_digest(fh, HASH).hexdigest()}"
        digest = hashlib.new(HASH)
        while block := fh.read(1 << 20):
            digest.update(block)
        return f"{HASH}:{digest.hexdigest()}"


def _listing(venv: Path) -> tuple[Entries, dict[str, str]]:
    """Each entry's kind without reading a file (folders, links, others), and the regular files
    still to hash (relative path -> absolute path). Symlinks are never followed."""
    entries: Entries = {}
    files: dict[str, str] = {}
    for folder, dirs, names in os.walk(venv):
        rel_folder = Path(folder).relative_to(venv)
        for name in [*dirs, *names]:
            full = os.path.join(folder, name)
            rel = (rel_folder / name).as_posix()
            mode = os.lstat(full).st_mode
            if stat.S_ISLNK(mode):
                entries[rel] = f"link:{os.readlink(full)}"
            elif stat.S_ISDIR(mode):
                entries[rel] = "dir"
            elif stat.S_ISREG(mode):
                files[rel] = full
            else:
                entries[rel] = "special"
    return entries, files


def snapshot(venv: Path) -> Entries:
    """Every entry of the venv: path relative to it -> sha256:…, link:TARGET, dir or special."""
    entries, files = _listing(venv)
    with ThreadPoolExecutor(_HASH_THREADS) as pool:  # hashlib hashes without the GIL
        entries.update(zip(files, pool.map(file_digest, files.values()), strict=True))
    return dict(sorted(entries.items()))


def write_manifest(venv: Path) -> None:
    atomic_write_json(
        manifest_path(venv),
        {"kind": KIND, "schema_version": SCHEMA_VERSION, "entries": snapshot(venv)},
    )


def read_manifest(venv: Path) -> Entries | None:
    """The recorded entries; None when there is no manifest, or one this suite does not read
    (an older suite's, a damaged file): such a venv is rebuilt, never trusted."""
    try:
        doc = json.loads(manifest_path(venv).read_text("utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(doc, dict) or doc.get("kind") != KIND:
        return None
    entries = doc.get("entries")
    if doc.get("schema_version") != SCHEMA_VERSION or not isinstance(entries, dict):
        return None
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in entries.items()):
        return None
    return entries


def differences(venv: Path, recorded: Entries) -> list[str]:
    """How the venv differs from what its manifest records: empty when it holds exactly that;
    else at least the first few differing paths, each with what happened to it (added,
    missing, changed)."""
    entries, files = _listing(venv)
    found = [*entries, *files]
    out = [f"{rel} added" for rel in sorted(set(found) - set(recorded))]
    out += [f"{rel} missing" for rel in sorted(set(recorded) - set(found))]
    out += [
        f"{rel} changed" for rel, kind in sorted(entries.items()) if recorded.get(rel, kind) != kind
    ]
    if len(out) >= SHOWN:
        return out
    # Only files both sides hold are hashed, and none once enough differences are known.
    kept = {rel: full for rel, full in sorted(files.items()) if rel in recorded}
    with ThreadPoolExecutor(_HASH_THREADS) as pool:
        digests = pool.map(file_digest, kept.values())
        out += [
            f"{rel} changed"
            for rel, digest in zip(kept, digests, strict=True)
            if recorded[rel] != digest
        ]
    return out


# What a cheap look at an entry sees: its type and permissions, size, inode and ctime. A write,
# a rename over it, a chmod or a touch changes the ctime, which no process can set back.
Stat = tuple[int, int, int, int]


def stat_snapshot(venv: Path) -> dict[str, Stat]:
    """Every entry of the venv (links not followed), by path relative to it, as lstat sees it:
    taken once a side is prepared, then compared before every round it serves (reading no
    file, so the look costs a walk of the folder, not a hash of it)."""
    out: dict[str, Stat] = {}
    for folder, dirs, names in os.walk(venv):
        for name in [*dirs, *names]:
            full = os.path.join(folder, name)
            st = os.lstat(full)
            rel = Path(os.path.relpath(full, venv)).as_posix()
            out[rel] = (st.st_mode, st.st_size, st.st_ino, st.st_ctime_ns)
    return out


def stat_differences(venv: Path, before: dict[str, Stat]) -> list[str]:
    """How the venv's entries differ from a stat_snapshot: added, missing or changed paths."""
    now = stat_snapshot(venv)
    out = [f"{rel} added" for rel in sorted(set(now) - set(before))]
    out += [f"{rel} missing" for rel in sorted(set(before) - set(now))]
    out += [f"{rel} changed" for rel in sorted(set(now) & set(before)) if now[rel] != before[rel]]
    return out
