"""False-alarm and detection rates of the latency gate, measured on this machine.

Each try is one cell run on two sides in interleaved rounds, exactly as `ab` runs it; the
candidate side does N% more work (N = 0 for A/A). The gate is the policy's latency_p50 gate with
the threshold given here. Prints the rate of 'fail' verdicts per injected change, with 95%
Wilson intervals, and the smallest change detected in >= 95% of tries at <= 1% false alarms.

    python bench/detect.py [--tries 40] [--rounds 3] [--threshold 0.03] [--levels 5 10 20]
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
import time
from pathlib import Path

from tabulate import tabulate

from suite.compare import Side, decide
from suite.matrix import Entry, Matrix, expand
from suite.policy import Gate, load_policy
from suite.progress import Progress
from suite.runner import Run, RunOptions

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


def run_level(extra: float, tries: int, rounds: int, threshold: float, out: Path) -> dict[str, int]:
    matrix = Matrix(
        name="detect",
        file="<bench>",
        sha256="0" * 64,
        profile="smoke",
        backends=("cpu",),
        timeout_s=300.0,
        entries=[
            Entry(
                f"{HERE / 'work.py'}:ScaledWork",
                "production",
                {"trial": list(range(tries))},
                None,
                None,
                0,
            )
        ],
    )
    cells, resolved = expand(matrix)
    runs = {}
    for role, work in (("baseline", 0.0), ("candidate", extra)):
        options = RunOptions(
            out=out / role,
            rounds=tuple(range(rounds)),
            command=["bench/detect.py"],
            extra_env={EXTRA_VAR: str(work)},
        )
        runs[role] = Run(matrix, options, cells, resolved)
    progress = Progress(len(cells) * rounds * 2, stream=sys.stderr)
    for round_no in range(rounds):
        order = ("baseline", "candidate") if round_no % 2 == 0 else ("candidate", "baseline")
        for spec in cells:
            for role in order:
                doc, _ = runs[role].execute(spec, round_no)
                progress.finished(f"{spec.cell_id} +{extra:g}% {role} r{round_no}", doc)
    for run in runs.values():
        run.finish()
    policy = load_policy(None, "research")
    gates = dict(policy.gates)
    gates["latency_p50"] = Gate("latency_p50", "soft", threshold=threshold)
    policy = policy.__class__(**{**policy.__dict__, "gates": gates})
    decision = decide(Side.load(out / "baseline"), Side.load(out / "candidate"), policy)
    counts: dict[str, int] = {}
    for cell in decision["cells"]:
        verdict = next(g["verdict"] for g in cell["gates"] if g["gate"] == "latency_p50")
        counts[verdict] = counts.get(verdict, 0) + 1
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--tries", type=int, default=40)
    parser.add_argument("--aa-tries", type=int, help="A/A tries (default: --tries)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threshold", type=float, default=0.03)
    parser.add_argument("--levels", type=float, nargs="+", default=[5.0, 10.0, 20.0])
    args = parser.parse_args()
    start = time.perf_counter()
    rows = []
    rates: dict[float, float] = {}
    with tempfile.TemporaryDirectory(prefix="torch-matrix-detect-") as tmp:
        for extra in [0.0, *args.levels]:
            tries = args.aa_tries if extra == 0 and args.aa_tries else args.tries
            counts = run_level(extra, tries, args.rounds, args.threshold, Path(tmp) / f"x{extra:g}")
            fails = counts.get("fail", 0)
            lo, hi = wilson(fails, tries)
            rates[extra] = fails / tries
            label = "A/A (false alarm)" if extra == 0 else f"+{extra:g}% work (detection)"
            rows.append(
                [
                    label,
                    tries,
                    f"{fails / tries:.1%}",
                    f"{lo:.1%}..{hi:.1%}",
                    ", ".join(f"{k} {v}" for k, v in sorted(counts.items())),
                ]
            )
    print(tabulate(rows, headers=["injected", "tries", "'fail' rate", "95% CI", "verdicts"]))
    false_alarm = rates[0.0]
    detected = [x for x in args.levels if rates[x] >= 0.95]
    verdict = f"{min(detected):g}%" if detected and false_alarm <= 0.01 else "none of the levels"
    print(
        f"\nthreshold {args.threshold:.1%}, {args.rounds} rounds, smoke budget; false alarms "
        f"{false_alarm:.1%}; smallest change detected in >= 95% of tries at <= 1% false alarms: "
        f"{verdict} (target: 5%)"
    )
    print(f"wall time {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
