"""Synthetic run directories for the comparison tests: valid records with chosen numbers."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from suite.results import cell_file, write_result, write_run
from suite.spec import spec_hash
from suite.stats import NOISY_RELATIVE_IQR, noise_grade, summarize

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
) -> Path:
    entries = []
    for round_no in range(rounds):
        for i, cell in enumerate(cells):
            path = cell_file(out, cell.cell_id, round_no)
            write_result(path, _record(cell, run_id, round_no, seed * 1000 + round_no * 100 + i))
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
    write_run(out / "run.json", run)
    return out
