"""What a container of a step sees of the host: bind mounts at the same absolute paths, derived
from the step's own argv by one function, mounts_for. What the step writes is mounted read-write
(the run directory above --result, the folders of --out, --trace, --report, the checkpoint
folder of --into), what it only reads read-only (plugin files named in --spec or --workload with
their folders, --matrix, --policy, --from). uncovered() names the host paths an argv holds that
no mount covers: such a step is refused before its container starts, so a new step cannot
silently see nothing."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from suite.workloads import file_part

# How a step's argv names the host paths it touches: flag -> (access, levels above the value
# that the mount goes). `--result` is RUN/cells/CELL.json: the whole run directory is written
# (cells/, tensors/, the inductor cache). A flag given twice is mounted twice.
PATH_FLAGS: dict[str, tuple[str, int]] = {
    "--result": ("rw", 2),
    "--out": ("rw", 1),
    "--trace": ("rw", 1),
    "--report": ("rw", 1),
    "--into": ("rw", 0),
    "--from": ("ro", 0),
    "--matrix": ("ro", 0),
    "--policy": ("ro", 0),
}


# Flags whose value holds workload references (a JSON cell spec, or the reference itself).
REF_FLAGS = ("--spec", "--workload")


# Host folders that are never mounted whole, because the image has its own (HOME is /tmp inside)
# or because they hold far more than a plugin: a plugin file directly in one is mounted alone.
_WHOLE_FOLDER_NEVER = ("/", "/tmp", "/home", "/root", "/opt", "/usr", "/var", "/etc", "/srv")


def _refs(flag: str, value: str) -> list[str]:
    if flag == "--workload":
        return [value]
    try:
        spec = json.loads(value)
    except ValueError:
        return []
    return [spec["ref"]] if isinstance(spec, dict) and isinstance(spec.get("ref"), str) else []


def _plugin_mount(file: Path) -> str:
    """The folder of a plugin file (its siblings may be imported), or the file alone where the
    folder is one the container needs for itself or the user's home."""
    folder = file.parent
    return str(file) if str(folder) in _never() else str(folder)


def _never() -> set[str]:
    return {*_WHOLE_FOLDER_NEVER, str(Path.home())}


def _flag_values(argv: Sequence[str]) -> list[tuple[str, str]]:
    """(flag, value) pairs, `--flag value` and `--flag=value` alike."""
    pairs = []
    for i, word in enumerate(argv):
        if word.startswith("--") and "=" in word:
            flag, value = word.split("=", 1)
            pairs.append((flag, value))
        elif i + 1 < len(argv):
            pairs.append((word, argv[i + 1]))
    return pairs


def mounts_for(
    argv: Sequence[str],
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    *,
    create: bool = False,
) -> dict[str, str]:
    """Every host path the step with this argv reads or writes: path -> "rw" | "ro", collapsed.

    Relative paths count from cwd (default: this process's). With create, the folders the step
    writes are made here first; else Docker would make them, owned by root.
    """
    base = Path(cwd) if cwd is not None else Path.cwd()
    modes: dict[str, str] = {}

    def add(path: str, mode: str) -> None:
        modes[path] = "rw" if "rw" in (mode, modes.get(path)) else mode

    for flag, value in _flag_values(argv):
        if flag in PATH_FLAGS:
            mode, levels = PATH_FLAGS[flag]
            path = base / value
            target = path.parents[levels - 1] if levels else path
            if mode == "rw" and create:
                target.mkdir(parents=True, exist_ok=True)
            add(str(target), mode)
        elif flag in REF_FLAGS:
            for ref in _refs(flag, value):
                file = file_part(ref)
                if file is not None:
                    add(_plugin_mount((base / file).absolute()), "ro")
    cache = (env or {}).get("TORCHINDUCTOR_CACHE_DIR")
    if cache:
        # The folder above the cache (a cell's cache is removed and made again around it),
        # unless that is a folder never mounted whole: then the cache itself.
        path = (base / cache).absolute()
        target = path if str(path.parent) in _never() else path.parent
        if create:
            target.mkdir(parents=True, exist_ok=True)
        add(str(target), "rw")
    return collapse(modes)


def uncovered(argv: Sequence[str], mounts: Mapping[str, str], cwd: Path | None = None) -> list[str]:
    """Host paths the argv names (existing ones, as values of any flag) that no mount covers.

    `--path` is exempt: it only adds to the worker's sys.path, and an entry missing inside the
    image is skipped by Python.
    """
    base = Path(cwd) if cwd is not None else Path.cwd()
    roots = [Path(p) for p in mounts]
    missing = []
    for flag, value in _flag_values(argv):
        if flag == "--path" or not value.startswith("/"):
            continue
        candidates = [value]
        if flag in REF_FLAGS:
            candidates = [f for r in _refs(flag, value) if (f := file_part(r)) is not None]
        for candidate in candidates:
            path = (base / candidate).absolute()
            if path.exists() and not any(path.is_relative_to(r) for r in roots):
                missing.append(str(path))
    return missing


def collapse(mounts: Mapping[str, str]) -> dict[str, str]:
    """Mounts (path -> "rw" | "ro") less those a mount above already covers at the same access.

    A read-write folder inside a read-only one stays: Docker mounts the inner one over it.
    """
    norm: dict[str, str] = {}
    for path, mode in mounts.items():
        key = os.path.normpath(path)
        norm[key] = "rw" if "rw" in (mode, norm.get(key)) else mode
    return {
        p: mode
        for p, mode in sorted(norm.items())
        if not any(
            q != p and Path(p).is_relative_to(q) and (outer == "rw" or outer == mode)
            for q, outer in norm.items()
        )
    }
