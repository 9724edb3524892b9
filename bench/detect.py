"""False-alarm and detection rates of the latency gate under the sequential procedure, here.

Each try is one cell run on two sides exactly as `ab` runs it: paired rounds, one fresh worker
per side per round, the side order alternating, more rounds look by look until the latency
gate decides or the last look passes. The candidate side does N% more work (N = 0 for A/A).
Prints, per level, the verdicts, the rate of `fail` with its 95% Wilson interval, the mean
rounds used and the wall time; then an A/A with a background CPU load (one busy process the
bench starts and stops), where `inconclusive` is fine and `fail` is not.

    python bench/detect.py [--threshold 0.03] [--aa 20] [--five 20] [--ten 10] [--loaded 10]
                           [--backend cpu|cuda|rocm|mps] [--json FILE]
    python bench/detect.py --metric instructions [--threshold 0.01] [--aa 20] [--five 20]
                           [--two 20]

With --metric instructions the gate is the instructions gate instead: each cell runs one round
per side (its status), then counts on both sides as `ab` does (two counting processes per side,
both sides at once); levels A/A, +5% and +2% work. The work added is matmuls, so a cell's
instructions grow a little less than the work (the step's fixed part stays).

--json writes the rates as they come, level by level, so a run cut short keeps what it has.

Targets (2-core machine, quiet): A/A fail in 0 of >= 20; +5% fail in >= 19 of 20; +10% in all
of 10; loaded A/A fail in 0 of 10. Run it alone: anything beside it is background load.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import multiprocessing
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from tabulate import tabulate

from suite.core.loaded import LoadedRun
from suite.execute.environment import RunOptions
from suite.execute.prepared import PreparedSide
from suite.execute.progress import Progress
from suite.execute.runner import Run
from suite.flows.compare import decide
from suite.flows.counts import count_cells
from suite.flows.rounds import Rounds
from suite.judge.policy import Gate, Policy, load_policy
from suite.judge.sequential import TIMING_GATES
from suite.workloads.matrix import Entry, Matrix, expand

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from work import EXTRA_VAR  # noqa: E402


def wilson(hits: int, n: int, z: float = 1.96) -> tuple[float, float]:
    if n == 0:
        return 0.0, 1.0
    p = hits / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def bench_policy(threshold: float, budget_s: float | None) -> Policy:
    """The research profile with the latency_p50 gate at `threshold` and no other timing gate
    (one gate per try, so the rates are the rates of one gate)."""
    policy = load_policy(None, "research")
    gates = {
        name: gate
        for name, gate in policy.gates.items()
        if name not in ("latency_p95", "throughput", "compile_time")
    }
    gates["latency_p50"] = Gate("latency_p50", "soft", threshold=threshold)
    design = dataclasses.replace(policy.design, budget_s=budget_s)
    return dataclasses.replace(policy, gates=gates, design=design)


def instructions_policy(threshold: float) -> Policy:
    """The research profile with the instructions gate at `threshold` and no timing gate."""
    policy = load_policy(None, "research")
    gates = {name: gate for name, gate in policy.gates.items() if name not in TIMING_GATES}
    gates["instructions"] = Gate("instructions", "soft", threshold=threshold)
    return dataclasses.replace(policy, gates=gates, design=policy.design.fixed(1))


def run_level(
    extra: float,
    tries: int,
    policy: Policy,
    out: Path,
    seed: int,
    backend: str = "cpu",
    metric: str = "latency_p50",
) -> tuple[Counter[str], float, float]:
    """(verdict counts, mean rounds, wall seconds) of `tries` cells at `extra` % more work."""
    matrix = Matrix(
        name="detect",
        file="<bench>",
        sha256="0" * 64,
        profile="smoke",
        backends=(backend,),
        timeout_s=300.0,
        entries=[
            Entry(
                f"{HERE / 'work.py'}:ScaledWork",
                "production",
                {"trial": list(range(seed, seed + tries))},
                None,
                None,
                0,
            )
        ],
    )
    cells, resolved = expand(matrix)
    start = time.perf_counter()
    runs = {}
    for role, work in (("baseline", 0.0), ("candidate", extra)):
        options = RunOptions(
            out=out / role,
            rounds=(),
            command=["bench/detect.py"],
            extra_env={EXTRA_VAR: str(work)},
        )
        runs[role] = Run(matrix, options, cells, resolved)
    progress = Progress(len(cells) * 2 * policy.design.looks[0], stream=sys.stderr)
    try:
        design = Rounds(runs, policy, policy.design, True, progress).run(cells)
    finally:
        for run in runs.values():
            run.close()
    for run in runs.values():
        run.doc["ab"] = {"design": design.as_dict()}
        run.finish()
    if metric == "instructions":
        here = sys.executable
        sides = {role: PreparedSide("current", role, here, 0.0, "current") for role in runs}
        count_cells(cells, runs, sides, progress)
    wall = time.perf_counter() - start
    decision = decide(LoadedRun.load(out / "baseline"), LoadedRun.load(out / "candidate"), policy)
    counts: Counter[str] = Counter()
    for cell in decision["cells"]:
        gate = next((g for g in cell["gates"] if g["gate"] == metric), None)
        counts[gate["verdict"] if gate else "missing"] += 1
    rounds = [len(runs["baseline"].records(spec)) for spec in cells]
    return counts, statistics.mean(rounds), wall


def _spin(stop: multiprocessing.synchronize.Event) -> None:
    x = 0
    while not stop.is_set():
        for _ in range(100_000):
            x += 1


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--metric", default="latency_p50", choices=["latency_p50", "instructions"])
    parser.add_argument("--threshold", type=float, default=None, help="0.03; 0.01 instructions")
    parser.add_argument("--two", type=int, default=20, help="+2%% tries (instructions)")
    parser.add_argument("--aa", type=int, default=20, help="A/A tries, quiet")
    parser.add_argument("--five", type=int, default=20, help="+5%% tries")
    parser.add_argument("--ten", type=int, default=10, help="+10%% tries")
    parser.add_argument("--loaded", type=int, default=10, help="A/A tries under a busy process")
    parser.add_argument(
        "--loaded-budget", type=float, default=600.0, help="round budget of the loaded A/A, s"
    )
    parser.add_argument("--backend", default="cpu", choices=["cpu", "cuda", "rocm", "mps"])
    parser.add_argument("--json", type=Path, help="also write the rates here, level by level")
    args = parser.parse_args()
    found: list[dict[str, object]] = []
    start = time.perf_counter()
    if args.threshold is None:
        args.threshold = 0.01 if args.metric == "instructions" else 0.03
    if args.metric == "instructions":
        quiet = instructions_policy(args.threshold)
        levels = [
            ("A/A (false alarm)", 0.0, args.aa, quiet, False),
            ("+5% work (detection)", 5.0, args.five, quiet, False),
            ("+2% work (detection)", 2.0, args.two, quiet, False),
        ]
    else:
        quiet = bench_policy(args.threshold, None)
        loaded = bench_policy(args.threshold, args.loaded_budget)
        levels = [
            ("A/A (false alarm)", 0.0, args.aa, quiet, False),
            ("+5% work (detection)", 5.0, args.five, quiet, False),
            ("+10% work (detection)", 10.0, args.ten, quiet, False),
            ("A/A, one busy process beside it", 0.0, args.loaded, loaded, True),
        ]
    rows = []
    with tempfile.TemporaryDirectory(prefix="torch-matrix-detect-") as tmp:
        for i, (label, extra, tries, policy, busy) in enumerate(levels):
            if tries <= 0:
                continue
            stop = multiprocessing.Event()
            spinner = multiprocessing.Process(target=_spin, args=(stop,), daemon=True)
            if busy:
                spinner.start()
            try:
                counts, mean_rounds, wall = run_level(
                    extra, tries, policy, Path(tmp) / f"level{i}", seed=100 * i,
                    backend=args.backend, metric=args.metric,
                )  # fmt: skip
            finally:
                if busy:
                    stop.set()
                    spinner.join(10)
                    if spinner.is_alive():
                        spinner.kill()
            fails = counts.get("fail", 0)
            lo, hi = wilson(fails, tries)
            rows.append(
                [
                    label,
                    tries,
                    f"{fails}/{tries} ({lo:.0%}..{hi:.0%})",
                    ", ".join(f"{k} {v}" for k, v in sorted(counts.items())),
                    f"{mean_rounds:.1f}",
                    f"{wall:.0f} s",
                ]
            )
            print(tabulate(rows[-1:], tablefmt="plain"), file=sys.stderr, flush=True)
            found.append(
                {
                    "level": label, "injected_percent": extra, "tries": tries, "fails": fails,
                    "fail_ci95": [lo, hi], "verdicts": dict(counts),
                    "mean_rounds": mean_rounds, "wall_s": wall, "backend": args.backend,
                    "threshold": args.threshold, "metric": args.metric,
                }
            )  # fmt: skip
            if args.json is not None:
                args.json.write_text(json.dumps(found, indent=2), encoding="utf-8")
    print(
        tabulate(
            rows,
            headers=["injected", "tries", "fail (95% CI)", "verdicts", "mean rounds", "wall"],
        )
    )
    design = quiet.design
    print(
        f"\n{args.metric}: threshold {args.threshold:.1%}; "
        f"looks {', '.join(map(str, design.looks))}; "
        f"per-look levels fail {design.fail_level:g}, pass {design.pass_level:g}; smoke budget"
    )
    print(f"wall time {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
