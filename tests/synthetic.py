"""Synthetic run directories for the comparison tests: valid records with chosen numbers."""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from suite.core.backends import backend_names
from suite.core.results import cell_file, write_result, write_run
from suite.core.spec import spec_hash
from suite.core.stats import NOISY_RELATIVE_IQR, noise_grade, summarize
from suite.judge.sequential import STEADY_STATE_GATES

ENV: dict[str, Any] = {
    "kind": "torch-matrix/environment",
    "schema_version": 1,
    "interpreter": "/usr/bin/python3",
    "python": "3.11.7",
    "os": {"system": "Linux", "release": "6.1", "platform": "Linux-6.1-x86_64"},
    "hostname": "runner-1",
    "cpu": {"model": "Test CPU", "logical_cores": 2},
    "memory_total_bytes": 24 * 2**30,
    "torch": {
        "version": "2.13.0+cpu",
        "git_version": "abc",
        "cuda": None,
        "hip": None,
        "cudnn": None,
        "nccl": None,
        "debug": False,
    },
    "backends": {
        "cpu": {"available": True, "reason": None, "devices": ["cpu"], "driver": None},
        "cuda": {"available": False, "reason": "no", "devices": [], "driver": None},
        "rocm": {"available": False, "reason": "no", "devices": [], "driver": None},
        "mps": {"available": False, "reason": "no", "devices": [], "driver": None},
    },
    "env_vars": {},
    "image": None,
    "packages": {},
}


@dataclass
class Cell:
    """One cell's behaviour on one side. level_s: median step time; spread: relative noise."""

    workload: str = "w"
    case: str = "a"
    backend: str = "cpu"
    lane: str = "production"
    status: str = "ok"
    failure_mode: str | None = None
    message: str = ""
    level_s: float = 0.010
    spread: float = 0.005
    samples: int = 40
    peak_bytes: int | None = 100 * 2**20
    rmse: float | None = 1e-7
    rmse_reference: float = 1e-7
    dtype: str = "fp32"
    metrics: dict[str, Any] = field(default_factory=dict)

    @property
    def cell_id(self) -> str:
        return f"{self.workload}.{self.case}@{self.backend}"


def _record(cell: Cell, run_id: str, round_no: int, seed: int) -> dict[str, Any]:
    spec = {
        "workload": cell.workload,
        "ref": cell.workload,
        "params": {"case": cell.case},
        "backend": cell.backend,
        "profile": "smoke",
        "lane": cell.lane,
    }
    doc: dict[str, Any] = {
        "kind": "torch-matrix/result",
        "schema_version": 1,
        "run_id": run_id,
        "cell_id": cell.cell_id,
        "spec": spec,
        "spec_hash": spec_hash(spec),
        "round": round_no,
        "status": cell.status,
        "failure": None,
        "started_at": "2026-11-30T10:00:00.000Z",
        "finished_at": "2026-11-30T10:00:01.000Z",
        "wall_s": 1.0,
        "torch": {"version": "2.13.0+cpu", "git_version": "abc"},
        "source": None,
        "timing": None,
        "noise": None,
        "throughput": None,
        "memory": None,
        "correctness": None,
        "metrics": cell.metrics,
        "fallback": None,
        "harness": None,
        "image": None,
        "warnings": [],
    }
    if cell.status != "ok" or cell.failure_mode:
        doc["failure"] = {
            "mode": cell.failure_mode or "exception",
            "message": cell.message or cell.status,
        }
    if cell.status in ("ok", "failed") and cell.failure_mode in (None, "correctness"):
        rng = random.Random(seed)
        samples = [
            cell.level_s * (1 + rng.uniform(-cell.spread, cell.spread)) for _ in range(cell.samples)
        ]
        summary = summarize(samples)
        doc["timing"] = {
            "cold_start_s": 0.5,
            "compile_s": None,
            "warmup_s": 0.01,
            "warmup_iters": 3,
            "samples_s": samples,
            "summary": dict(summary),
        }
        doc["noise"] = {
            "relative_iqr": summary["relative_iqr"],
            "grade": noise_grade(summary["relative_iqr"]),
            "threshold": NOISY_RELATIVE_IQR,
        }
        doc["throughput"] = {
            "unit": "items/s",
            "items_per_iter": 1000.0,
            "value": 1000.0 / summary["p50"],
        }
        if cell.peak_bytes is not None:
            doc["memory"] = {
                "method": "cpu-rss-hwm",
                "baseline_bytes": 0,
                "peak_bytes": cell.peak_bytes,
                "samples": 10,
            }
        if cell.rmse is not None:
            check = {
                "label": "output",
                "reference": "ref",
                "dtype": cell.dtype,
                "passed": True,
                "rmse_result": cell.rmse,
                "rmse_reference": cell.rmse_reference,
                "k": 2.0,
                "tol": 1e-5,
            }
            doc["correctness"] = {
                **{
                    k: check[k]
                    for k in (
                        "passed",
                        "dtype",
                        "rmse_result",
                        "rmse_reference",
                        "k",
                        "tol",
                        "reference",
                    )
                },
                "checks": [check],
            }
    return doc


def make_run(
    out: Path,
    cells: list[Cell],
    *,
    run_id: str,
    rounds: int = 3,
    env: dict[str, Any] | None = None,
    matrix_sha: str = "0" * 64,
    policy_sha: str | None = None,
    seed: int = 0,
    scales: Sequence[float] | None = None,
    job: str | None = None,
) -> Path:
    """scales: a factor on every cell's level_s in each round, to plant round-to-round changes;
    job: the plan's name of the bench job, as ab --job records it."""
    entries = []
    for round_no in range(rounds):
        for i, cell in enumerate(cells):
            path = cell_file(out, cell.cell_id, round_no)
            planted = cell
            if scales is not None:
                planted = replace(cell, level_s=cell.level_s * scales[round_no])
            write_result(path, _record(planted, run_id, round_no, seed * 1000 + round_no * 100 + i))
            entries.append(
                {
                    "cell_id": cell.cell_id,
                    "status": cell.status,
                    "file": str(path.relative_to(out)),
                    "wall_s": 1.0,
                    "round": round_no,
                }
            )
    run: dict[str, Any] = {
        "kind": "torch-matrix/run",
        "schema_version": 1,
        "run_id": run_id,
        "status": "complete",
        "started_at": "2026-11-30T10:00:00.000Z",
        "finished_at": "2026-11-30T10:10:00.000Z",
        "resumed_at": [],
        "command": ["torch-matrix", "run"],
        "cwd": "/work",
        "suite": {"version": "0.1.0", "commit": None, "dirty": None},
        "matrix": {"file": "<built-in default matrix>", "sha256": matrix_sha, "name": "default"},
        "profile": "smoke",
        "options": {},
        "interpreter": "/usr/bin/python3",
        "environment": env or ENV,
        "workloads": {},
        "cells": entries,
    }
    if policy_sha is not None:
        run["policy"] = {"sha256": policy_sha, "profile": "research"}
    if job is not None:
        run["ab"] = {"job": job}
    write_run(out / "run.json", run)
    return out


# A research-profile A/B on a CPU-only runner, as a decision record: the default matrix's
# workloads on cpu, cuda, rocm and mps (the last three skipped on both sides), the
# rollback check, and timing gates from the sequential paired procedure.
RESEARCH_BACKENDS = backend_names()
RESEARCH_CASES = {
    "flex_attention": (
        "causal",
        "sliding_window",
        "document",
        "prefix_lm",
        "causal.alibi",
        "causal.softcap",
        "causal.compiled.fp32",
        "causal.compiled.bf16",
        "document.bf16",
        "causal.fwd_bwd",
    ),
    "sdpa": ("default",),
    "linear_cross_entropy": ("default",),
    "mlp_train": ("default",),
}
# (p50 change, spread, rounds, verdict, undecided, needed rounds) of the cpu cells' timing,
# as the sequential design with looks at 6, 10, 14, 20 rounds and a time budget leaves them;
# a case missing here passes at the first look.
RESEARCH_TIMING: dict[str, tuple[float, float, int, str, str | None, int | None]] = {
    "flex_attention.causal": (0.012, 0.031, 6, "pass", None, None),
    "flex_attention.sliding_window": (-0.004, 0.046, 10, "pass", None, None),
    "flex_attention.document": (0.061, 0.092, 20, "inconclusive", "noise", 58),
    "flex_attention.prefix_lm": (-0.024, 0.118, 20, "inconclusive", "noise", 96),
    "flex_attention.causal.alibi": (-0.212, 0.040, 6, "improved", None, None),
    "flex_attention.causal.compiled.bf16": (0.034, 0.052, 14, "inconclusive", "budget", 31),
    "linear_cross_entropy.default": (0.021, 0.084, 20, "inconclusive", "noise", 49),
    "mlp_train.default": (-0.008, 0.064, 9, "inconclusive", "budget", 24),
}
_WHY = {
    "pass": "the interval stays inside the threshold on the worse side",
    "improved": "better beyond the threshold",
    "fail": "worse beyond the threshold",
}


def _gate_dict(gate: Any, verdict: str, message: str, **numbers: Any) -> dict[str, Any]:
    from suite.judge.verdicts import gate_result

    return gate_result(gate, verdict, message, **numbers)


def _timing_gate(gate: Any, case: str, level_s: float, scale: float) -> dict[str, Any]:
    change, spread, rounds, verdict, why, needed = RESEARCH_TIMING.get(
        case, (0.003, 0.02, 6, "pass", None, None)
    )
    change *= scale
    if gate.name == "latency_p95" and case == "flex_attention.causal.compiled.bf16":
        change, verdict, why, needed = 0.41, "fail", None, None
    half = 2 * spread / rounds**0.5
    ci = [change - half, change + half]
    unit, base, cand = "s", level_s, level_s * (1 + change)
    if gate.name == "throughput":  # higher is better: the change and its interval flip sign
        unit, base, cand = "items/s", 1000 / level_s, 1000 / (level_s * (1 + change))
        change, ci = -change, [-ci[1], -ci[0]]
    label = {"latency_p50": "p50", "latency_p95": "p95"}.get(gate.name, gate.name)
    if why is None:
        reason = _WHY[verdict]
    else:
        reason = {
            "noise": "not resolved by the last look (20 rounds)",
            "budget": f"the time budget ran out after {rounds} rounds",
        }[why] + f": spread {spread:.1%}, ≈{needed} rounds needed"
    message = (
        f"{label} {change:+.1%} (interval {ci[0]:+.1%}..{ci[1]:+.1%}), {rounds} rounds, "
        f"spread {spread:.1%}: {reason} (±{gate.threshold:.1%})"
    )
    return _gate_dict(
        gate,
        verdict,
        message,
        unit=unit,
        baseline=base,
        candidate=cand,
        change=change,
        ci=ci,
        rounds=rounds,
        spread=spread,
        needed_rounds=needed,
        undecided=why,
    )


def _research_cell(policy: Any, workload: str, case: str, backend: str) -> dict[str, Any]:
    gates = policy.gates
    cell_case = f"{workload}.{case}"
    absent = backend != "cpu"
    unsupported = cell_case == "flex_attention.causal.fwd_bwd"
    if absent or unsupported:
        status = "skipped" if absent else "unsupported"
        # what the worker's backend probe says on a CPU runner (suite/worker/backends.py)
        absent_why = {
            "cuda": "torch 2.13.0+cpu is not a CUDA build",
            "rocm": "torch 2.13.0+cpu is not a ROCm (HIP) build",
            "mps": "torch 2.13.0+cpu was built without MPS",
        }
        why = f"{status} (baseline {status}, candidate {status})"
        if absent:
            why += f": {absent_why[backend]}"
        verdicts = [
            _gate_dict(gates["status"], "untested" if absent else "unsupported", why),
            _gate_dict(
                gates["correctness"],
                "untested" if absent else "unsupported",
                f"no accuracy result to judge: {why}",
            ),
            *(
                _gate_dict(gates[name], "untested", "no steady-state timing on both sides")
                for name in STEADY_STATE_GATES
            ),
            _gate_dict(gates["peak_memory"], "untested", "no peak-memory reading on both sides"),
        ]
    else:
        status = "ok"
        level_s = 0.002 + 0.0007 * len(cell_case)
        verdicts = [
            _gate_dict(gates["status"], "pass", "ran on both pins", baseline="ok", candidate="ok"),
            _gate_dict(gates["correctness"], "pass", "1 accuracy checks pass"),
            _timing_gate(gates["latency_p50"], cell_case, level_s, 1.0),
            _timing_gate(gates["latency_p95"], cell_case, level_s * 1.2, 1.3),
            _timing_gate(gates["throughput"], cell_case, level_s, 1.0),
            _gate_dict(
                gates["peak_memory"],
                "pass",
                "peak 96.0 MiB -> 96.2 MiB: within 1.0 MiB",
                unit="B",
                baseline=96 * 2**20,
                candidate=96 * 2**20 + 2**18,
                change=0.0026,
            ),
        ]
    return {
        "cell_id": f"{cell_case}@{backend}",
        "row_id": f"{workload}@{backend}",
        "workload": workload,
        "backend": backend,
        "lane": "production",
        "baseline_status": status,
        "candidate_status": status,
        "gates": verdicts,
        "repro": None,
        "artifacts": {},
    }


def research_decision() -> dict[str, Any]:
    """17 rows (12 of them on absent backends), several inconclusive timing cells, one fail."""
    from suite.core.validation import validate
    from suite.judge.policy import load_policy
    from suite.judge.rules import apply_rules, overall

    policy = load_policy(None, "research")
    cells = [
        _research_cell(policy, workload, case, backend)
        for backend in RESEARCH_BACKENDS
        for workload, cases in RESEARCH_CASES.items()
        for case in cases
    ]
    for direction in ("candidate-to-baseline", "baseline-to-candidate"):
        cells.append(
            {
                "cell_id": f"rollback.checkpoint.torch_save.{direction}@any",
                "row_id": "rollback@any",
                "workload": "rollback",
                "backend": "any",
                "lane": "production",
                "baseline_status": None,
                "candidate_status": None,
                "gates": [_gate_dict(policy.gates["rollback"], "pass", "state_dict loads")],
                "repro": None,
                "artifacts": {},
            }
        )
    rows = apply_rules(policy, cells)
    decision, reasons = overall(rows, cells)
    side = {"torch": "2.13.0+cpu", "git_version": "abc", "interpreter": "/usr/bin/python3"}
    doc: dict[str, Any] = {
        "kind": "torch-matrix/decision",
        "schema_version": 1,
        "decision": decision,
        "reasons": reasons,
        "generated_at": "2026-11-30T10:20:00.000Z",
        "matrix": {"file": "<built-in default matrix>", "sha256": "0" * 64, "name": "default"},
        "policy": {**policy.evidence(), "mismatches": []},
        "baseline": {
            **side,
            "label": "baseline",
            "run_id": "20261130T100000Z-aaaaaa",
            "torch": "2.12.1+cpu",
            "dir": "ab/baseline",
        },
        "candidate": {
            **side,
            "label": "candidate",
            "run_id": "20261130T100000Z-bbbbbb",
            "dir": "ab/candidate",
        },
        "comparable": {"ok": True, "differences": []},
        "rows": rows,
        "cells": cells,
    }
    validate(doc, "torch-matrix/decision", file="<research decision>")
    return doc
