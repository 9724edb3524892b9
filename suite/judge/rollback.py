"""Judges the rollback checks of an A/B from what they left on disk, so that `ab` and
`aggregate` (which re-judges every CI job under the base branch's policy) reach the same cells.

`ab` runs the checks (suite/flows/rollback.py) and writes, under the A/B folder:
- rollback/record.json: how each step of the checkpoint round trips ended (exit codes) and what
  getting back to the baseline took (timing);
- rollback/DIRECTION.json: the reader's report for each direction (suite/worker/rollback.py);
- rehearsal/: the baseline's cells run once more, beside baseline/ from the rounds.
Nothing here starts a process or reads a message to decide: verdicts come from the reports'
numbers, the recorded statuses and the saved outputs.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from suite.core.accuracy import CHECKPOINT_TOLERANCE
from suite.core.decision_records import Cell, RollbackRecord
from suite.core.records import Verdict
from suite.core.results import cell_file
from suite.judge.policy import Gate, Policy
from suite.judge.saved_outputs import NotMeasurable, saved_drift
from suite.judge.verdicts import gate_result

ROLLBACK_GATE = Gate("rollback", "hard", required=True)
DEFAULT_DRIFT_TOLERANCE = 1e-4
# Each pin writes, the other reads: a rollback needs the first, adoption the second.
DIRECTIONS = (("candidate", "baseline"), ("baseline", "candidate"))
RECORD = Path("rollback") / "record.json"


def direction(writer: str, reader: str) -> str:
    return f"{writer}-to-{reader}"


def rollback_cell(name: str, verdict: Verdict, message: str, **numbers: Any) -> Cell:
    gate = gate_result(ROLLBACK_GATE, verdict, message, **numbers)
    return {
        "cell_id": f"rollback.{name}@any", "row_id": "rollback@any", "workload": "rollback",
        "backend": "any", "lane": "production", "baseline_status": None, "candidate_status": None,
        "gates": [gate], "repro": None, "artifacts": {},
    }  # fmt: skip


def checkpoint_cells(way: str, report: dict[str, Any]) -> list[Cell]:
    """One rollback cell per checkpoint format of a reader's report, judged from its numbers:
    the format loaded (no error) and training continued within CHECKPOINT_TOLERANCE."""
    cells = []
    for fmt, result in report["formats"].items():
        what = f"{fmt} written by torch {report['written_by']}, loaded by {report['torch']}"
        diff = result.get("max_rel_diff")
        name = f"checkpoint.{fmt}.{way}"
        if diff is None:
            cells.append(rollback_cell(name, "fail", f"{what}: {result.get('error')}"))
        elif not math.isfinite(diff) or diff > CHECKPOINT_TOLERANCE:
            cells.append(
                rollback_cell(
                    name,
                    "fail",
                    f"{what}: the continued loss differs by {diff:.3g} (relative) "
                    f"> {CHECKPOINT_TOLERANCE:g}",
                )
            )
        else:
            message = f"{what}: training continues alike (max relative difference {diff:.2g})"
            cells.append(rollback_cell(name, "pass", message))
    return cells


def compatibility_cells(
    out: Path, steps: dict[str, dict[str, Any]]
) -> tuple[list[Cell], dict[str, Any]]:
    """The checkpoint cells of both directions, and the reports they came from."""
    cells: list[Cell] = []
    reports: dict[str, Any] = {}
    for writer, reader in DIRECTIONS:
        way = direction(writer, reader)
        step = steps.get(way) or {}
        report_path = out / "rollback" / f"{way}.json"
        if step.get("read_exit") == 0 and report_path.is_file():
            report = json.loads(report_path.read_text("utf-8"))
            reports[way] = report
            cells.extend(checkpoint_cells(way, report))
            continue
        failed = "writing" if step.get("write_exit") != 0 else "reading"
        code = step.get("write_exit") if failed == "writing" else step.get("read_exit")
        ended = "timed out" if code is None else f"exit {code}"
        logs = out / "rollback" / "logs"
        cells.append(
            rollback_cell(
                f"checkpoint.{way}", "fail", f"{failed} the checkpoint failed ({ended}); see {logs}"
            )
        )
    return cells, reports


def _dtype(record: dict[str, Any]) -> str:
    return str(((record.get("spec") or {}).get("params") or {}).get("dtype", "fp32"))


def judge_rehearsal(
    cell_ids: list[str],
    base_dir: Path,
    rehearsal_dir: Path,
    policy: Policy,
    timing: dict[str, float],
) -> Cell:
    """Did every cell reproduce its round-0 status and outputs (within the drift tolerance)?"""
    gate = policy.gates.get("drift")
    limits = (gate.relative_tolerance or {}) if gate else {}
    mismatches: list[str] = []
    unmeasured: list[str] = []
    for cell_id in cell_ids:
        again, earlier_path = cell_file(rehearsal_dir, cell_id), cell_file(base_dir, cell_id)
        if not again.is_file() or not earlier_path.is_file():
            side = "rehearsal" if not again.is_file() else "baseline"
            mismatches.append(f"{cell_id}: no {side} record")
            continue
        doc = json.loads(again.read_text("utf-8"))
        earlier = json.loads(earlier_path.read_text("utf-8"))
        if doc["status"] != earlier["status"]:
            mismatches.append(f"{cell_id}: status {earlier['status']} then {doc['status']}")
            continue
        if doc.get("outputs") and earlier.get("outputs"):
            tolerance = limits.get(_dtype(earlier)) or DEFAULT_DRIFT_TOLERANCE
            try:
                found = saved_drift(
                    base_dir / earlier["outputs"]["file"], rehearsal_dir / doc["outputs"]["file"]
                )
            except NotMeasurable as exc:
                unmeasured.append(f"{cell_id}: {exc}")
                continue
            if found.relative > tolerance:
                mismatches.append(
                    f"{cell_id}: {found.name} differs by {found.relative:.3g} > {tolerance:g}"
                )
    text = (
        f"back to the baseline in {timing['duration_s']:.0f}s (environment "
        f"{timing['environment_ready_s']:.0f}s, rehearsal of {len(cell_ids)} cells "
        f"{timing['rehearsal_s']:.0f}s)"
    )
    numbers = {"candidate": timing["duration_s"], "unit": "s"}
    if not mismatches and unmeasured:
        return rollback_cell(
            "rehearsal", "untested", f"{text}; outputs not compared: {unmeasured[0]}", **numbers
        )
    if not mismatches:
        return rollback_cell(
            "rehearsal", "pass", f"{text}; every cell reproduced its earlier result", **numbers
        )
    more = f" (+{len(mismatches) - 5} more)" if len(mismatches) > 5 else ""
    return rollback_cell(
        "rehearsal",
        "fail",
        f"{text}; the baseline does not reproduce itself: " + "; ".join(mismatches[:5]) + more,
        **numbers,
    )


def _rollback_record(timing: dict[str, float], reports: dict[str, Any]) -> RollbackRecord:
    record: RollbackRecord = {"checkpoints": reports}
    for key in ("duration_s", "environment_ready_s", "rehearsal_s"):
        if key in timing:
            record[key] = float(timing[key])
    return record


def judge_rollback(out: Path, policy: Policy) -> tuple[list[Cell], RollbackRecord | None]:
    """The rollback cells of one A/B folder and its rollback record for decision.json; no
    cells where the checks did not run (the required gate is then untested)."""
    path = out / RECORD
    if not path.is_file():
        return [], None
    record = json.loads(path.read_text("utf-8"))
    cells, reports = compatibility_cells(out, record["steps"])
    rehearsal = out / "rehearsal"
    if not (rehearsal / "run.json").is_file():
        missing = f"the rehearsal left no {rehearsal / 'run.json'}"
        cells.append(rollback_cell("rehearsal", "fail", missing))
        return cells, _rollback_record(record["timing"], reports)
    run = json.loads((rehearsal / "run.json").read_text("utf-8"))
    cell_ids = list(dict.fromkeys(c["cell_id"] for c in run["cells"] if c["round"] == 0))
    cells.append(judge_rehearsal(cell_ids, out / "baseline", rehearsal, policy, record["timing"]))
    return cells, _rollback_record(record["timing"], reports)
