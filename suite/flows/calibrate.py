"""Calibration: what a runner's noise lets each timing threshold resolve.

An A/A (the same torch as both sides, in the interleaved paired rounds of an A/B) measures the
round-to-round spread s of each cell's timing gates. With R rounds, the sequential test tells a
change from no change once it exceeds about (z_f + z_p) * s / sqrt(R) in log space (the normal
approximation behind suite.judge.sequential.needed_rounds), so e^that - 1 is the smallest change a
threshold can detect here. A threshold below it can only end inconclusive; `ab` and `plan` say
so before a run, and never change the threshold.

Everything but run_calibration is pure: records and a policy in, plain data out.
"""

from __future__ import annotations

import math
import socket
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from suite.core.decision_records import (
    CalibrationCell,
    CalibrationGate,
    CalibrationRecord,
    RunnerIdentity,
)
from suite.core.errors import InputError
from suite.core.host import cpu_model
from suite.core.records import Result
from suite.core.results import atomic_write_json, record_wall_s, utc_now
from suite.core.spec import CellSpec
from suite.core.validation import load_document, validate
from suite.judge.gates import paired_rounds, side_status
from suite.judge.policy import Policy
from suite.judge.sequential import TIMING_GATES, Design, needed_rounds, z_critical

if TYPE_CHECKING:
    from suite.execute.prepared import PreparedSide
    from suite.execute.progress import Progress
    from suite.workloads import Resolved
    from suite.workloads.matrix import Matrix

KIND = "torch-matrix/calibration"
SCHEMA_VERSION = 1
Record = Result


def round_wall_s(base: Sequence[Record], cand: Sequence[Record]) -> float | None:
    """Mean wall time of one round of a cell: both sides, over the rounds both ran."""
    b = {r["round"]: record_wall_s(r) for r in base}
    c = {r["round"]: record_wall_s(r) for r in cand}
    rounds = sorted(b.keys() & c.keys())
    return statistics.fmean(b[i] + c[i] for i in rounds) if rounds else None


def resolvable_rounds(design: Design, wall_per_round_s: float | None) -> int | None:
    """The most rounds a verdict can rest on: the last look, or the last look the time budget
    reaches; None when the budget reaches no look.

    The A/B starts a round while the time spent is under the budget, so ceil(budget / wall)
    rounds run. A verdict is reached only at a look: rounds past the last look reached decide
    nothing, hence the look and not the round count. The estimate assumes every cell runs every
    round; cells that decide early drop out, so a real A/B may reach further.
    """
    cap = design.max_rounds
    if design.budget_s is not None and wall_per_round_s is not None and wall_per_round_s > 0:
        cap = min(cap, math.ceil(design.budget_s / wall_per_round_s))
    return max((n for n in design.looks if n <= cap), default=None)


def min_detectable(spread: float, rounds: int, design: Design) -> float:
    """The smallest relative change R rounds at this spread tell from no change:
    exp((z_f + z_p) * s / sqrt(R)) - 1."""
    z = z_critical(design.fail_level) + z_critical(design.pass_level)
    return math.expm1(z * spread / math.sqrt(rounds))


def runner_identity(environment: Mapping[str, Any], hostname: str | None = None) -> RunnerIdentity:
    """Who measured: the machine, the torch and interpreter, and the backends it could use.

    hostname: the parent's, when the workers ran somewhere that names itself differently (a
    container's hostname is its id, new each run); the warnings match the machine.
    """
    backends = environment.get("backends") or {}
    return {
        "hostname": hostname if hostname is not None else environment.get("hostname"),
        "cpu_model": environment["cpu"]["model"],
        "logical_cores": environment["cpu"].get("logical_cores"),
        "torch": environment["torch"]["version"],
        "interpreter": environment.get("interpreter"),
        "python": environment.get("python"),
        "backends": sorted(name for name, b in backends.items() if b.get("available")),
    }


def this_runner() -> dict[str, str]:
    """This machine, as far as matching a calibration needs it: without importing torch, so
    that `plan` stays cheap."""
    return {"hostname": socket.gethostname(), "cpu_model": cpu_model()}


def _machine(identity: Mapping[str, Any]) -> tuple[Any, Any]:
    """(hostname, cpu model) of a runner identity or of an environment record."""
    if "cpu_model" in identity:
        return identity.get("hostname"), identity["cpu_model"]
    return identity.get("hostname"), (identity.get("cpu") or {}).get("model")


def _gate_entry(
    d: Sequence[float], threshold: float, design: Design, rounds: int | None
) -> CalibrationGate:
    spread = statistics.stdev(d) if len(d) >= 2 else None
    return {
        "spread": spread,
        "mean": math.fsum(d) / len(d),
        "rounds": len(d),
        "threshold": threshold,
        "min_detectable": (
            min_detectable(spread, rounds, design)
            if spread is not None and rounds is not None
            else None
        ),
        "rounds_needed": (
            needed_rounds(spread, math.log1p(threshold), design) if spread is not None else None
        ),
    }


def calibration(
    baseline: Mapping[str, Sequence[Record]],
    candidate: Mapping[str, Sequence[Record]],
    policy: Policy,
    runner: RunnerIdentity,
    *,
    created_at: str | None = None,
) -> CalibrationRecord:
    """The calibration record of an A/A: records by cell id on each side, in the baseline's
    cell order; the design and thresholds are the policy's."""
    design = policy.design
    ids = [cid for cid in baseline if cid in candidate]
    walls = {cid: round_wall_s(baseline[cid], candidate[cid]) for cid in ids}
    rounds = resolvable_rounds(design, math.fsum(w for w in walls.values() if w is not None))
    cells: list[CalibrationCell] = []
    for cid in ids:
        base, cand = baseline[cid], candidate[cid]
        gates: dict[str, CalibrationGate] = {}
        for name in TIMING_GATES:
            gate = policy.gates.get(name)
            if gate is None or gate.threshold is None:
                continue
            _, _, d = paired_rounds(name, base, cand)
            if d:  # a gate with no paired rounds (compile time of an eager cell) has no spread
                gates[name] = _gate_entry(d, gate.threshold, design, rounds)
        cells.append(
            {
                "cell_id": cid,
                "status": side_status([*base, *cand]) or "untested",
                "round_wall_s": walls[cid],
                "gates": gates,
            }
        )
    doc: CalibrationRecord = {
        "kind": "torch-matrix/calibration",
        "schema_version": SCHEMA_VERSION,
        "created_at": created_at or utc_now(),
        "runner": runner,
        "policy": {"file": policy.file, "sha256": policy.sha256, "profile": policy.profile},
        "design": design.as_dict(),
        "rounds": max((len(baseline[cid]) for cid in ids), default=0),
        "resolvable_rounds": rounds,
        "cells": cells,
    }
    validate(doc, KIND, file="<calibration>")
    return doc


def write_calibration(path: Path, doc: CalibrationRecord) -> None:
    validate(doc, KIND, file=str(path))
    atomic_write_json(path, doc)


def read_calibration(path: Path) -> CalibrationRecord:
    doc = load_document(path)
    validate(doc, KIND, file=str(path))
    assert isinstance(doc, dict)
    return cast(CalibrationRecord, doc)


def threshold_warnings(
    calibration: Mapping[str, Any],
    policy: Policy,
    cells: Sequence[CellSpec],
    runner: Mapping[str, Any],
) -> list[str]:
    """One line per selected, calibrated cell and timing gate whose threshold is below what this
    runner can resolve; one line alone when the calibration comes from another runner.

    runner: this machine, as a runner identity or an environment record. The resolution is
    worked out again under this policy's design and for the selected cells' share of its time
    budget, since both may differ from the calibration's; cells the calibration lacks add no
    time, so the estimate can only err towards fewer warnings.
    """
    recorded = calibration["runner"]
    if _machine(recorded) != _machine(runner):
        host, cpu = _machine(recorded)
        here_host, here_cpu = _machine(runner)
        return [
            f"the calibration is from another runner ({host}, {cpu}), not this one "
            f"({here_host}, {here_cpu}); its spreads say nothing here: run torch-matrix "
            "calibrate on this runner"
        ]
    by_id = {c["cell_id"]: c for c in calibration["cells"]}
    found = [by_id[spec.cell_id] for spec in dict.fromkeys(cells) if spec.cell_id in by_id]
    design = policy.design
    wall = math.fsum(c["round_wall_s"] or 0.0 for c in found)
    rounds = resolvable_rounds(design, wall)
    if rounds is None:
        assert design.budget_s is not None  # only a budget keeps a verdict from every look
        return [
            f"the time budget of {design.budget_s:g}s fits about "
            f"{math.ceil(design.budget_s / wall)} rounds of the selected cells "
            f"({wall:.1f}s a round), fewer than the first look at {design.looks[0]}; "
            "every timing gate will end inconclusive"
        ]
    out = []
    for cell in found:
        for name in TIMING_GATES:
            gate = policy.gates.get(name)
            entry = cell["gates"].get(name)
            if gate is None or gate.threshold is None or entry is None:
                continue
            if entry["spread"] is None:
                continue
            resolved = min_detectable(entry["spread"], rounds, design)
            if gate.threshold < resolved:
                out.append(
                    f"{cell['cell_id']} {name}: threshold {gate.threshold:.1%} is below the "
                    f"{resolved:.1%} this runner can resolve in {rounds} rounds "
                    f"(spread {entry['spread']:.1%}); expect inconclusive"
                )
    return out


@dataclass(frozen=True)
class CalibrateOptions:
    out: Path  # the calibration file
    runs: Path  # where the A/A's two run directories go
    rounds: int
    timeout_s: float | None
    memory_limit_bytes: int | None
    progress: Progress | None
    force: bool = False


def check_out(path: Path, force: bool) -> None:
    """Refuse to overwrite a calibration before an A/A spends minutes on a new one."""
    if path.exists() and not force:
        raise InputError(
            "already exists; pass --force to overwrite it, or choose another --out", file=str(path)
        )
    if path.is_dir():
        raise InputError("is a directory; --out names the calibration file", file=str(path))


def run_calibration(
    matrix: Matrix,
    cells: Sequence[CellSpec],
    resolved: dict[str, Resolved],
    side: PreparedSide,
    policy: Policy,
    options: CalibrateOptions,
) -> CalibrationRecord:
    """Run the A/A, then write and return its calibration record."""
    # Imported here: plan and ab read calibrations without the machinery that runs workers.
    from suite.core.loaded import LoadedRun
    from suite.flows.ab import AbOptions, run_ab

    check_out(options.out, options.force)
    # The A/A runs every round it was asked for; the policy's budget belongs to the A/B being
    # calibrated for, and is applied to the measured wall times afterwards.
    unbudgeted = replace(policy, design=replace(policy.design, budget_s=None))
    ab_options = AbOptions(
        out=options.runs,
        rounds=options.rounds,
        timeout_s=options.timeout_s,
        memory_limit_bytes=options.memory_limit_bytes,
        progress=options.progress,
        traces=False,
        rollback=False,
    )
    run_ab(matrix, cells, resolved, side, side, unbudgeted, ab_options)
    base = LoadedRun.load(options.runs / "baseline")
    cand = LoadedRun.load(options.runs / "candidate")
    runner = runner_identity(base.run["environment"], hostname=socket.gethostname())
    doc = calibration(base.results, cand.results, policy, runner)
    write_calibration(options.out, doc)
    return doc
