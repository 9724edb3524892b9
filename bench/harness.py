"""Harness figures: timer overhead per sample, CPU peak-memory accuracy against a known
allocation, harness overhead per cell, and the wall time of the default smoke run.

    python bench/harness.py [--skip-smoke] [--out DIR]

Targets: timer overhead <= 1 us per sample; memory within 5%; harness overhead <= 10% of cell
wall time; default smoke run <= 6 minutes on a 2-core machine.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tabulate import tabulate

from suite.backends import get
from suite.measure import time_call, timer_overhead_s
from suite.stats import quantile

HERE = Path(__file__).resolve().parent


def timer_figures() -> list[list[str]]:
    bare = timer_overhead_s(repeats=50000)
    cpu = get("cpu")
    with_sync = sorted(
        time_call(lambda: None, cpu.sync, time.perf_counter_ns) for _ in range(50000)
    )
    return [
        [
            "timer overhead per sample (empty call, no-op sync)",
            f"{bare * 1e9:.0f} ns",
            "<= 1000 ns",
        ],
        [
            "timer overhead per sample (cpu backend sync)",
            f"{quantile(with_sync, 0.5) * 1e9:.0f} ns",
            "<= 1000 ns",
        ],
    ]


def run_suite(args: list[str]) -> float:
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "suite", "run", *args], check=False)
    if proc.returncode not in (0, 1):
        raise SystemExit(f"torch-matrix run {' '.join(args)} exited {proc.returncode}")
    return time.perf_counter() - start


def memory_figures(out: Path) -> list[list[str]]:
    run_dir = out / "known-alloc"
    run_suite(
        [
            "--workload",
            f"{HERE / 'known_alloc.py'}:KnownAlloc",
            "--backend",
            "cpu",
            "--out",
            str(run_dir),
        ]
    )
    rows = []
    for path in sorted((run_dir / "cells").glob("*.json")):
        doc = json.loads(path.read_text())
        expected = doc["metrics"]["expected_bytes"]["value"]
        peak = doc["memory"]["peak_bytes"]
        rows.append(
            [
                f"CPU peak memory, {expected >> 20} MiB allocation ({doc['memory']['method']})",
                f"{peak / 2**20:.1f} MiB ({(peak - expected) / expected:+.2%})",
                "within 5%",
            ]
        )
    return rows


def overhead_figures(run_dir: Path) -> list[list[str]]:
    """Share of each launched cell's wall time (parent's view) spent outside timed regions."""
    outside: list[float] = []
    harness_only: list[float] = []
    for path in sorted((run_dir / "cells").glob("*.json")):
        doc = json.loads(path.read_text())
        h, t = doc.get("harness"), doc.get("timing")
        if not h or not t or "parent_wall_s" not in h:
            continue
        wall = h["parent_wall_s"]
        timed = (t["cold_start_s"] or 0) + (t["warmup_s"] or 0) + h["timed_s"]
        outside.append(1 - timed / wall)
        harness_only.append(1 - h["workload_s"] / wall)
    if not outside:
        return [["harness overhead", "no measured cells", "<= 10%"]]
    o, ho = sorted(outside), sorted(harness_only)
    return [
        [
            "wall time outside timed regions / cell wall (median over cells)",
            f"{quantile(o, 0.5):.1%} (max {o[-1]:.1%})",
            "<= 10%",
        ],
        [
            "of which harness alone (process start, imports, records) (median)",
            f"{quantile(ho, 0.5):.1%} (max {ho[-1]:.1%})",
            "<= 10%",
        ],
    ]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--skip-smoke", action="store_true", help="skip the default smoke run")
    parser.add_argument("--out", type=Path, help="keep the runs here (default: a temporary folder)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="torch-matrix-bench-") as tmp:
        out = args.out or Path(tmp)
        rows = timer_figures() + memory_figures(out)
        if not args.skip_smoke:
            smoke = out / "default-smoke"
            wall = run_suite(["--out", str(smoke)])
            rows += overhead_figures(smoke)
            rows.append(["default smoke run, wall time", f"{wall:.0f} s", "<= 360 s"])
        print(tabulate(rows, headers=["figure", "measured", "target"]))


if __name__ == "__main__":
    main()
