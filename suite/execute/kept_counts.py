"""Counts kept across runs: an instruction count is a function of the cell, the code that runs
it and the build it runs on, so a count made once is not made again while none of them changed.
The baseline side of a team's A/Bs is the pin they are on: without this, every A/B against a new
candidate counted it again, half the counting phase.

A count is kept under the cache root (suite/execute/cache.py) at a key that digests everything a
count depends on:
- the cell (its spec hash) and the replicate;
- the suite's own code (every .py of the package: the worker, the counting steps, the built-in
  workloads);
- the side: for a local interpreter, its version and executable, a digest of each installed
  distribution's RECORD (which lists a sha256 of every file the distribution installed), and of
  what lies loose at the top of each folder on sys.path (the names, and each file: a .pth, a
  sitecustomize.py that patches torch), read with the worker's environment; for a docker: side,
  the image digest;
- the environment a worker imports with (suite/execute/forkserver.py import_time_env, the
  suite's own import path left out: it differs from clone to clone, and the code digest
  covers it);
- the counting setup: Valgrind's version and options, the count's steps and warm-up calls, the
  CPU's model and flags (Valgrind's emulated CPU follows the host's).

What no key can cover is not kept: a plugin workload (its code lives outside the suite and may
import anything beside it), a side with an editable install other than this suite's own, or
with a folder on sys.path outside the interpreter's prefixes, a docker: side without a digest.
Only counts that counted are kept. A kept count is copied into the run with its per-function
totals and profile, and says where it came from (`instructions.kept`); the gate's message
counts them (suite/judge/instructions.py)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from suite.core.errors import InputError
from suite.core.records import Result
from suite.core.results import read_result, write_result
from suite.core.spec import CellSpec
from suite.execute.cache import cache_root
from suite.execute.environment import suite_import_root
from suite.execute.forkserver import import_time_env
from suite.workloads import BUILTINS

KEEP_VERSION = 1
KEPT_DIR = "counts"
RECORD = "record.json"
KEY = "key.json"  # the digest of each part of the side's key
# Beside a count record: the per-function totals and the callgrind profile.
BESIDE = (".functions.tsv", ".callgrind")
PROBE_TIMEOUT_S = 120.0
OWN_DISTRIBUTION = "torch_matrix"
# Read by torch when an op runs, not at import: the CPU kernels it dispatches to.
RUNTIME_READ = ("ATEN_",)

# Run with the worker's environment, so that sys.path is the worker's.
_PROBE = r"""
import hashlib, json, os, sys
out = {"version": sys.version, "executable": os.path.realpath(sys.executable),
       "prefixes": sorted({sys.prefix, sys.base_prefix, sys.exec_prefix}), "paths": [], "dists": [],
       "loose": []}
for entry in sys.path[1:]:
    if not entry or not os.path.isdir(entry):
        continue
    out["paths"].append(os.path.realpath(entry))
    loose = hashlib.sha256()
    for name in sorted(os.listdir(entry)):
        path = os.path.join(entry, name)
        loose.update(name.encode() + b"\0")
        if os.path.isfile(path):
            size = os.path.getsize(path)
            if size > 4 << 20:
                loose.update(f"{size} {os.path.getmtime(path)}".encode())
            else:
                with open(path, "rb") as fh:
                    loose.update(fh.read())
        if not name.endswith(".dist-info"):
            continue
        info = os.path.join(entry, name)
        try:
            with open(os.path.join(info, "RECORD"), "rb") as fh:
                record = hashlib.sha256(fh.read()).hexdigest()
        except OSError:
            record = None
        try:
            with open(os.path.join(info, "direct_url.json"), encoding="utf-8") as fh:
                url = json.load(fh)
        except (OSError, ValueError):
            url = None
        out["dists"].append([name, record, url])
    out["loose"].append(loose.hexdigest())
print(json.dumps(out))
"""


@dataclass(frozen=True)
class KeptCounts:
    """The kept counts of one side: `side_key` digests all a count depends on beside the cell,
    or is None with `why` when the side cannot be keyed (nothing is then kept or reused)."""

    root: Path
    side_key: str | None
    why: str = ""
    parts: Mapping[str, str] = field(default_factory=dict)  # what the side key digests

    def key(self, spec: CellSpec, replicate: int) -> str | None:
        if self.side_key is None or spec.ref not in BUILTINS:
            return None
        text = json.dumps([KEEP_VERSION, self.side_key, spec.spec_hash, replicate])
        return hashlib.sha256(text.encode()).hexdigest()

    def _folder(self, key: str) -> Path:
        return self.root / KEPT_DIR / key[:2] / key

    def reuse(self, spec: CellSpec, replicate: int, path: Path, run_id: str) -> Result | None:
        """The kept count copied to `path` (a run's count record) for this run, or None."""
        key = self.key(spec, replicate)
        if key is None:
            return None
        began = time.monotonic()
        folder = self._folder(key)
        try:
            doc = read_result(folder / RECORD)
        except (InputError, OSError):
            return None
        counted = doc.get("instructions") or {}
        if doc.get("spec_hash") != spec.spec_hash or not counted.get("per_step"):
            return None
        run_dir = path.parent.parent
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            for suffix in BESIDE:
                kept = folder / f"{RECORD}{suffix}"
                if kept.is_file():
                    shutil.copyfile(kept, path.with_suffix(suffix))
        except OSError:
            return None  # counted again: a cache that cannot be read never stops a run
        for name, suffix in (("functions", BESIDE[0]), ("profile", BESIDE[1])):
            if counted.get(name):
                beside = path.with_suffix(suffix)
                counted[name] = str(beside.relative_to(run_dir)) if beside.is_file() else None
        counted["kept"] = {
            "key": key,
            "run_id": str(doc["run_id"]),
            "counted_at": str(doc.get("finished_at") or doc["started_at"]),
        }
        doc["run_id"] = run_id
        doc["instructions"] = counted
        # What the reuse cost this run, charged to its budget; the count's own cost is kept.
        harness = doc.get("harness") or {}
        if "parent_wall_s" in harness:
            harness["counted_wall_s"] = harness["parent_wall_s"]
        harness["parent_wall_s"] = round(time.monotonic() - began, 3)
        doc["harness"] = harness
        write_result(path, doc)
        return doc

    def keep(self, spec: CellSpec, replicate: int, path: Path, doc: Result) -> None:
        """Keep a count that counted (a kept one is not kept again), written whole or not."""
        key = self.key(spec, replicate)
        counted = doc.get("instructions") or {}
        if key is None or doc.get("status") != "ok" or not counted.get("per_step"):
            return
        if counted.get("kept"):
            return
        folder = self._folder(key)
        folder.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{key[:8]}-", dir=folder.parent))
        try:
            for suffix in BESIDE:
                if path.with_suffix(suffix).is_file():
                    shutil.copyfile(path.with_suffix(suffix), staging / f"{RECORD}{suffix}")
            write_result(staging / RECORD, doc)
            (staging / KEY).write_text(json.dumps(dict(self.parts), indent=1), encoding="utf-8")
            shutil.rmtree(folder, ignore_errors=True)
            os.replace(staging, folder)
        except OSError:
            pass  # a count not kept is counted again next time: nothing is lost
        finally:
            shutil.rmtree(staging, ignore_errors=True)


def kept_counts(
    interpreter: str,
    env: Mapping[str, str],
    counting_setup: Mapping[str, Any],
    image_digest: str | None = None,
    in_container: bool = False,
) -> KeptCounts:
    """The kept counts of one side, keyed as the module says."""
    root = cache_root()
    if in_container:
        if not image_digest:
            return KeptCounts(root, None, "the side's image has no digest")
        side: Any = {"image": image_digest}
    else:
        side, why = _interpreter_identity(interpreter, env)
        if side is None:
            return KeptCounts(root, None, why)
    suite_root = str(suite_import_root())
    imported = {
        k: os.pathsep.join(p for p in v.split(os.pathsep) if p != suite_root)
        if k == "PYTHONPATH"
        else v
        for k, v in import_time_env(env).items()
    }
    runtime = {k: v for k, v in env.items() if k.startswith(RUNTIME_READ)}
    parts = {
        "code": _code_digest(),
        "side": side,
        "imported": imported,
        "runtime": runtime,
        "counting": dict(counting_setup),
        "cpu": _cpu(),
    }
    # Each part's digest, kept beside a count (never the values: an environment may hold a
    # secret), so that a count counted again can say which part changed.
    digests = {name: _digest(part) for name, part in parts.items()}
    return KeptCounts(root, _digest([KEEP_VERSION, digests]), parts=digests)


def _digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()


def _interpreter_identity(interpreter: str, env: Mapping[str, str]) -> tuple[Any, str]:
    try:
        proc = subprocess.run(
            [interpreter, "-c", _PROBE], env=dict(env), capture_output=True, text=True,
            timeout=PROBE_TIMEOUT_S, check=False, cwd=tempfile.gettempdir(),
        )  # fmt: skip
        found = json.loads(proc.stdout) if proc.returncode == 0 else None
    except (OSError, subprocess.TimeoutExpired, ValueError):
        found = None
    if not isinstance(found, dict):
        return None, "the side's interpreter did not say what it has installed"
    own = Path(suite_import_root()).resolve()
    inside = [os.path.realpath(p) for p in found["prefixes"]] + [str(own)]
    for entry in found["paths"]:
        if not any(entry == p or entry.startswith(p + os.sep) for p in inside):
            return None, f"sys.path holds {entry}, whose code no key covers"
    for name, _, url in found["dists"]:
        editable = isinstance(url, dict) and (url.get("dir_info") or {}).get("editable")
        # This suite installed editable is shadowed in a worker by its import path, first on it.
        if editable and not name.startswith(f"{OWN_DISTRIBUTION}-"):
            return None, f"{name.removesuffix('.dist-info')} is an editable install"
    return found, ""


def _code_digest() -> str:
    package = (Path(suite_import_root()) / "suite").resolve()
    digest = hashlib.sha256()
    for path in sorted(package.rglob("*.py")):
        digest.update(str(path.relative_to(package)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def _cpu() -> list[str]:
    """The host CPU's model and flags, which Valgrind's emulated CPU follows."""
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    wanted = ("model name", "flags", "vendor_id")
    lines = {line.split(":", 1)[0].strip(): line for line in text.splitlines() if ":" in line}
    return [lines[name] for name in wanted if name in lines]
