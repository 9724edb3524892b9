"""What a run directory holds and how a run starts or resumes in one: run.json as first
written, the entries of rounds not run yet, the copies of the inputs its repro lines name, and
which records --resume may keep (the very files the run wrote, by their sha256)."""

from __future__ import annotations

import hashlib
import os
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from suite import __version__
from suite.core.errors import EnvironmentProblem, InputError, warn
from suite.core.records import Result, RunCell, RunRecord
from suite.core.results import INPUTS_DIR, cell_file, read_result, read_run, utc_now
from suite.core.spec import CellSpec
from suite.execute.environment import RunOptions, suite_commit
from suite.workloads import Resolved
from suite.workloads.matrix import Matrix


def record_digest(path: Path) -> str | None:
    """sha256 of a record file as written, which run.json keeps beside its entry."""
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


def reusable_record(
    path: Path, spec: CellSpec, torch_version: str, digest: str | None, round_no: int
) -> Result | None:
    """An existing record that --resume may keep: the very file the run wrote (its sha256 as
    run.json recorded it), valid, same spec, same torch. A record that is there but cannot be
    kept is redone, and the user is told which round and why."""
    if not path.is_file():
        return None
    why = None
    found = record_digest(path)
    if digest is None:
        why = "run.json recorded no digest for it (the run stopped while writing it)"
    elif found != digest:
        why = f"it changed since it was written (sha256 {str(found)[:12]}, recorded {digest[:12]})"
    else:
        try:
            doc = read_result(path)
        except InputError as exc:
            why = f"it does not read: {str(exc).splitlines()[0][:200]}"
        else:
            if doc["spec_hash"] != spec.spec_hash:
                why = "it is of another cell spec"
            elif doc["torch"] is not None and doc["torch"].get("version") != torch_version:
                why = f"it ran torch {doc['torch'].get('version')}, not {torch_version}"
            else:
                return doc
    warn(f"resume: round {round_no} of {spec.cell_id} is run again: {why}")
    return None


def keep_inputs(run_dir: Path, files: Sequence[Path]) -> None:
    """Copy each input file into RUN_DIR/inputs/<its absolute path>, so that the run directory
    alone (a CI artifact) holds what its reproduce lines name (suite/flows/repro.py)."""
    for file in files:
        source = file.absolute()
        if not source.is_file():
            continue
        copy = run_dir / INPUTS_DIR / source.relative_to(source.anchor)
        try:
            copy.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, copy)
        except OSError as exc:
            raise EnvironmentProblem(f"cannot keep a copy of {source} in {copy}: {exc}") from exc


def existing_run(path: Path, resume: bool) -> RunRecord | None:
    """The run.json a resumed run continues; one found without --resume is an error."""
    if not path.exists():
        return None
    if not resume:
        raise InputError(
            "already holds a run; pass --resume to finish it, or choose another --out",
            file=str(path),
        )
    return read_run(path)


def prepare_dir(run_dir: Path) -> None:
    """Create the run directory, without the temporary files a killed run left in it."""
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise EnvironmentProblem(f"cannot create output directory {run_dir}: {exc}") from exc
    for stale in run_dir.glob("cells/.*.tmp"):
        stale.unlink(missing_ok=True)


def pending_entry(run_dir: Path, cell_id: str, round_no: int) -> RunCell:
    """run.json's entry of a round not run yet."""
    return {
        "cell_id": cell_id,
        "status": "pending",
        "file": str(cell_file(run_dir, cell_id, round_no).relative_to(run_dir)),
        "wall_s": None,
        "round": round_no,
    }


def new_run_doc(
    matrix: Matrix,
    options: RunOptions,
    cells: Sequence[CellSpec],
    resolved: dict[str, Resolved],
    run_id: str,
    environment: dict[str, Any],
    existing: RunRecord | None,
) -> RunRecord:
    """A new run.json, or the one of EXISTING resumed: its run id and start kept."""
    commit, dirty = suite_commit()
    resumed = [*existing.get("resumed_at", []), utc_now()] if existing else []
    return {
        "kind": "torch-matrix/run",
        "schema_version": 1,
        "run_id": run_id,
        "status": "running",
        "started_at": existing["started_at"] if existing else utc_now(),
        "finished_at": None,
        "resumed_at": resumed,
        "command": options.command or ["torch-matrix"],
        "cwd": os.getcwd(),
        "suite": {"version": __version__, "commit": commit, "dirty": dirty},
        "matrix": matrix.evidence(),
        "profile": matrix.profile,
        "options": {
            "timeout_s": options.timeout_s,
            "memory_limit_bytes": options.memory_limit_bytes,
            "rounds": len(options.rounds),
            # Where distributed cells' nodes ran (suite/execute/nodes.py); ssh options (key
            # paths) are left out.
            "launcher": options.nodes.evidence() if options.nodes is not None else None,
        },
        "interpreter": options.interpreter,
        "environment": environment,
        "workloads": {
            ref: {"ref": ref, "module": r.module, "file": r.file, "sha256": r.sha256}
            for ref, r in resolved.items()
        },
        "cells": [pending_entry(options.out, c.cell_id, r) for r in options.rounds for c in cells],
    }
