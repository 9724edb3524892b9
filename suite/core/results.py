"""Result and run records: building, atomic writing, and schema-checked reading."""

from __future__ import annotations

import datetime as dt
import json
import os
import secrets
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast

from suite.core.errors import InputError, no_room
from suite.core.records import FailureMode, Result, RunRecord, Status
from suite.core.spec import CellSpec
from suite.core.validation import load_document, validate

STDERR_TAIL_CHARS = 4000


# A run's copies of the files it read (matrix, plugins, policy), by their absolute paths: the
# run directory alone then holds what its reproduce lines name.
INPUTS_DIR = "inputs"
# Records of the counting processes of the instructions gate (suite/execute/counting.py).
COUNTS_DIR = "counts"
# An A/B's second look at a cell whose timing gate failed or improved: that cell alone, fresh
# workers on both sides, paired rounds of its own; a run directory inside the side's.
ALONE_DIR = "alone"
# Records of rounds another process disturbed, set aside when the round ran again.
DISTURBED_DIR = "disturbed"


def utc_now() -> str:
    return (
        dt.datetime.now(dt.timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    )


def new_run_id() -> str:
    """Sortable by start time, unique by its random suffix."""
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    return f"{stamp}-{secrets.token_hex(3)}"


def atomic_write_json(path: Path, doc: Any) -> None:
    """Write via a temporary file in the same folder and rename: readers never see half a file,
    and a write that fails leaves no temporary file behind."""
    text = json.dumps(doc, indent=2, sort_keys=False) + "\n"
    tmp: str | None = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
        problem = no_room(exc, f"{path} (it was not changed, and no partial file is left)")
        if problem is not None:
            raise problem from None
        raise
    except BaseException:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
        raise


def cell_file(run_dir: Path, cell_id: str, round_no: int = 0) -> Path:
    suffix = "" if round_no == 0 else f"~r{round_no}"
    return run_dir / "cells" / f"{cell_id}{suffix}.json"


def disturbed(record: Mapping[str, Any]) -> bool:
    """Whether another process competed for the worker's CPUs in the record's timed region
    (suite/worker/measure.py); an unmeasured region is not disturbed."""
    timing = record.get("timing") or {}
    return bool((timing.get("disturbance") or {}).get("disturbed"))


def record_wall_s(record: Mapping[str, Any]) -> float:
    """What one worker cost: the parent's wall time, process start and exit included, else
    the worker's own. The time budget of an A/B is charged with this."""
    harness = record.get("harness") or {}
    return float(harness["parent_wall_s"] if "parent_wall_s" in harness else record["wall_s"])


def tail(text: str, limit: int = STDERR_TAIL_CHARS) -> str:
    return text if len(text) <= limit else "…" + text[-limit:]


def base_result(spec: CellSpec, run_id: str, round_no: int, started_at: str) -> Result:
    return {
        "kind": "torch-matrix/result",
        "schema_version": 1,
        "run_id": run_id,
        "cell_id": spec.cell_id,
        "spec": spec.as_dict(),
        "spec_hash": spec.spec_hash,
        "round": round_no,
        "status": "ok",
        "failure": None,
        "started_at": started_at,
        "finished_at": started_at,
        "wall_s": 0.0,
        "torch": None,
        "source": None,
        "timing": None,
        "noise": None,
        "throughput": None,
        "memory": None,
        "correctness": None,
        "metrics": {},
        "fallback": None,
        "harness": None,
        "image": None,
        "warnings": [],
    }


def failure_result(
    spec: CellSpec,
    run_id: str,
    round_no: int,
    *,
    status: Status,
    mode: FailureMode,
    message: str,
    started_at: str,
    wall_s: float,
    exit_code: int | None = None,
    signal: str | None = None,
    stderr: str | None = None,
    exception_type: str | None = None,
) -> Result:
    doc = base_result(spec, run_id, round_no, started_at)
    doc["status"] = status
    doc["finished_at"] = utc_now()
    doc["wall_s"] = wall_s
    doc["failure"] = {
        "mode": mode,
        "message": message,
        "exception_type": exception_type,
        "signal": signal,
        "exit_code": exit_code,
        "stderr_tail": tail(stderr) if stderr else None,
    }
    return doc


def write_result(path: Path, doc: Mapping[str, Any]) -> None:
    validate(doc, "torch-matrix/result", file=str(path))
    atomic_write_json(path, doc)


def read_result(path: Path) -> Result:
    doc = load_document(path)
    validate(doc, "torch-matrix/result", file=str(path))
    assert isinstance(doc, dict)
    return cast(Result, doc)


def write_run(path: Path, doc: RunRecord) -> None:
    validate(doc, "torch-matrix/run", file=str(path))
    atomic_write_json(path, doc)


def read_run(path: Path) -> RunRecord:
    if not path.is_file():
        raise InputError(
            "no run record here; is this a torch-matrix run directory?", file=str(path)
        )
    doc = load_document(path)
    validate(doc, "torch-matrix/run", file=str(path))
    assert isinstance(doc, dict)
    return cast(RunRecord, doc)


def read_run_dir(run_dir: Path) -> tuple[RunRecord, list[Result]]:
    """The run record and every cell result it lists, all schema-checked."""
    run = read_run(run_dir / "run.json")
    results = []
    for cell in run["cells"]:
        if cell["status"] == "pending":
            continue
        results.append(read_result(run_dir / cell["file"]))
    return run, results
