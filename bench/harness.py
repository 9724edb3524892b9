"""Harness figures: does the harness time what a user's code would see, and what does a round
cost?

1. Timer overhead per sample.
2. CPU peak-memory accuracy against known allocations (the memory pass).
3. Harness p50 against the same step timed by a plain loop in a fresh process
   (bench/plain_step.py), the two alternating, K processes each: the medians must agree
   within 10% and the process-to-process spread of the harness's p50 must be no wider than
   1.25x the plain loop's.
4. Share of each cell's wall time spent outside its timed regions (cold call, warmup,
   samples) in a smoke run of the built-in matrix on the CPU: target <= 25% (median).

    python bench/harness.py [--processes 10] [--skip-smoke] [--out DIR]

Run it alone: anything beside it is background load, and the spreads measure that instead.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tabulate import tabulate

from suite.core.stats import quantile
from suite.execute.environment import RunOptions
from suite.execute.runner import Run
from suite.worker.backends import get
from suite.worker.measure import time_call, timer_overhead_s
from suite.workloads.matrix import expand, load_matrix, select

HERE = Path(__file__).resolve().parent
# Cells of the built-in matrix the p50 comparison times: attention, a training step, SDPA.
COMPARED = (
    "flex_attention.causal.none.eager.fp32.fwd.s512@cpu",
    "sdpa.causal.fp32.fwd.s256@cpu",
    "mlp_train.eager.fp32.b64h256@cpu",
)


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
                f"CPU peak memory, {expected >> 20} MiB allocation "
                f"({doc['memory']['method']}, {doc['memory'].get('pass')} pass)",
                f"{peak / 2**20:.1f} MiB ({(peak - expected) / expected:+.2%})",
                "within 5%",
            ]
        )
    return rows


def _cv(values: list[float]) -> float:
    """Process-to-process spread: sd of ln(p50)."""
    return statistics.stdev(math.log(v) for v in values)


def plain_figures(out: Path, processes: int) -> list[list[str]]:
    matrix = select(load_matrix(None), [], ["cpu"], None)
    cells, resolved = expand(matrix)
    chosen = [c for c in cells if c.cell_id in COMPARED]
    options = RunOptions(out=out / "compare", rounds=(), command=["bench/harness.py"])
    run = Run(matrix, options, chosen, resolved)
    harness: dict[str, list[float]] = {c.cell_id: [] for c in chosen}
    plain: dict[str, list[float]] = {c.cell_id: [] for c in chosen}
    try:
        for i in range(processes):
            for spec in chosen:
                # Alternate which goes first, so drift of the machine hits both alike.
                for which in ("harness", "plain") if i % 2 == 0 else ("plain", "harness"):
                    if which == "harness":
                        doc, _ = run.execute(spec, i)
                        harness[spec.cell_id].append(doc["timing"]["summary"]["p50"])
                    else:
                        line = (
                            subprocess.run(
                                [sys.executable, str(HERE / "plain_step.py"), spec.to_json()],
                                capture_output=True,
                                text=True,
                                check=True,
                            )
                            .stdout.strip()
                            .splitlines()[-1]
                        )
                        plain[spec.cell_id].append(json.loads(line)["p50_s"])
    finally:
        run.close()
    run.finish()
    rows = []
    for cell_id in harness:
        h, p = harness[cell_id], plain[cell_id]
        ratio = statistics.median(h) / statistics.median(p)
        rows.append(
            [
                f"p50 harness / plain loop, {cell_id}",
                f"{statistics.median(h) * 1e3:.3f} / {statistics.median(p) * 1e3:.3f} ms "
                f"= {ratio:.3f}",
                "within 10%",
            ]
        )
        rows.append(
            [
                f"process-to-process spread (sd ln p50, {processes} each), {cell_id}",
                f"harness {_cv(h):.1%}, plain {_cv(p):.1%} ({_cv(h) / max(_cv(p), 1e-12):.2f}x)",
                "<= 1.25x",
            ]
        )
    return rows


def overhead_figures(run_dir: Path) -> list[list[str]]:
    """Share of each launched cell's wall time (parent's view) spent outside timed regions."""
    outside: list[float] = []
    harness_only: list[float] = []
    forked = 0
    for path in sorted((run_dir / "cells").glob("*.json")):
        doc = json.loads(path.read_text())
        h, t = doc.get("harness"), doc.get("timing")
        if not h or not t or "parent_wall_s" not in h:
            continue
        wall = h["parent_wall_s"]
        timed = (t["cold_start_s"] or 0) + (t["warmup_s"] or 0) + h["timed_s"]
        outside.append(1 - timed / wall)
        harness_only.append(1 - h["workload_s"] / wall)
        forked += bool(h.get("forked"))
    if not outside:
        return [["harness overhead", "no measured cells", "<= 25%"]]
    o, ho = sorted(outside), sorted(harness_only)
    return [
        [
            f"wall time outside timed regions / cell wall (median of {len(o)} cells, "
            f"{forked} forked)",
            f"{quantile(o, 0.5):.1%} (max {o[-1]:.1%})",
            "<= 25%",
        ],
        [
            "of which harness alone (process start, imports, records) (median)",
            f"{quantile(ho, 0.5):.1%} (max {ho[-1]:.1%})",
            "",
        ],
    ]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--processes", type=int, default=10, help="processes per side, p50 check")
    parser.add_argument("--skip-smoke", action="store_true", help="skip the default smoke run")
    parser.add_argument("--out", type=Path, help="keep the runs here (default: a temporary folder)")
    args = parser.parse_args()
    with contextlib.ExitStack() as stack:
        out = args.out or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="tm-bench-")))
        rows = timer_figures() + memory_figures(out) + plain_figures(out, args.processes)
        if not args.skip_smoke:
            smoke = out / "default-smoke"
            wall = run_suite(["--backend", "cpu", "--out", str(smoke)])
            rows += overhead_figures(smoke)
            rows.append(["default smoke run on the CPU, wall time", f"{wall:.0f} s", ""])
        print(tabulate(rows, headers=["figure", "measured", "target"]))


if __name__ == "__main__":
    main()
