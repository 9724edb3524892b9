"""Disturbed rounds, seen and rerun: an A/A of the built-in SDPA (causal, fp32) and MLP train
cells on this interpreter, with one busy process (a spinning Python, on any CPU) started before
and stopped after the first attempt of each of rounds 2-6. Prints, per cell and round, the
attempts, what the worker saw of other processes (other CPUs) and whether the round was
disturbed; then the latency gates' verdicts and messages, and the wall time.

    python bench/disturbed.py [--rounds 10] [--busy 2-6] [--out DIR]

Targets: the planted rounds are marked disturbed and rerun, no gate is `fail`. Run it alone:
anything beside it is a disturbance too, and shows as one.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tabulate import tabulate

from suite.core.loaded import LoadedRun
from suite.core.results import disturbed
from suite.core.spec import CellSpec
from suite.execute.environment import RunOptions
from suite.execute.progress import Progress
from suite.execute.runner import Run
from suite.flows.compare import decide
from suite.flows.rounds import Rounds
from suite.judge.policy import load_policy
from suite.workloads.matrix import Entry, Matrix, expand

SPIN = "while True: pass"


class PlantedRounds(Rounds):
    """Rounds whose chosen rounds run their first attempt beside a busy process."""

    busy_rounds: frozenset[int] = frozenset()

    def pair(self, spec: CellSpec, round_no: int, position: int = 0) -> None:
        if round_no not in self.busy_rounds:
            super().pair(spec, round_no, position)
            return
        spinner = subprocess.Popen([sys.executable, "-c", SPIN])
        original = self.runs["baseline"].set_aside

        def stop_then_set_aside(spec_: CellSpec, round_: int) -> Path:
            spinner.kill()  # the repeat runs without it
            return original(spec_, round_)

        self.runs["baseline"].set_aside = stop_then_set_aside  # type: ignore[method-assign]
        try:
            super().pair(spec, round_no, position)
        finally:
            spinner.kill()
            spinner.wait()
            self.runs["baseline"].set_aside = original  # type: ignore[method-assign]


def _matrix() -> Matrix:
    return Matrix(
        name="disturbed",
        file="<bench>",
        sha256="0" * 64,
        profile="smoke",
        backends=("cpu",),
        timeout_s=300.0,
        entries=[
            Entry("sdpa", "production", {"mask": ["causal"], "dtype": ["fp32"]}, None, None, 0),
            Entry("mlp_train", "production", {}, None, None, 0),
        ],
    )


def _attempts(out: Path, spec: CellSpec, round_no: int) -> list[dict[str, object]]:
    """Every record of a round on the baseline side: the set-aside ones, then the kept one."""
    stem = f"{spec.cell_id}{'' if round_no == 0 else f'~r{round_no}'}"
    aside = sorted((out / "baseline" / "disturbed").glob(f"{stem}.a*.json"))
    kept = out / "baseline" / "cells" / f"{stem}.json"
    return [json.loads(p.read_text()) for p in [*aside, kept] if p.is_file()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--busy", default="2-6", help="rounds whose first attempt is disturbed")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    first, _, last = args.busy.partition("-")
    busy = frozenset(range(int(first), int(last or first) + 1))
    out = args.out or Path(tempfile.mkdtemp(prefix="torch-matrix-disturbed-"))
    policy = load_policy(None, "research")
    gates = {k: v for k, v in policy.gates.items() if k != "instructions"}
    policy = dataclasses.replace(policy, gates=gates)
    design = policy.design.fixed(args.rounds)
    matrix = _matrix()
    cells, resolved = expand(matrix)
    runs = {
        role: Run(matrix, RunOptions(out=out / role, rounds=(), command=["bench"]), cells, resolved)
        for role in ("baseline", "candidate")
    }
    start = time.perf_counter()
    rounds = PlantedRounds(runs, policy, design, True, Progress(0, stream=sys.stderr))
    rounds.busy_rounds = busy
    try:
        final = rounds.run(cells)
    finally:
        for run in runs.values():
            run.close()
    for run in runs.values():
        run.doc["ab"] = {"design": final.as_dict()}
        run.finish()
    wall = time.perf_counter() - start
    rows = []
    for spec in cells:
        for round_no in range(args.rounds):
            for attempt, doc in enumerate(_attempts(out, spec, round_no)):
                seen = (doc.get("timing") or {}).get("disturbance") or {}
                p50 = ((doc.get("timing") or {}).get("summary") or {}).get("p50")
                rows.append([
                    spec.cell_id, round_no, attempt, "yes" if round_no in busy and attempt == 0
                    else "", seen.get("other_cpus"), "disturbed" if disturbed(doc) else "",
                    f"{p50 * 1e3:.3f}" if p50 else None,
                ])  # fmt: skip
    print(
        tabulate(
            rows,
            headers=["cell", "round", "attempt", "busy planted", "other CPUs", "", "p50 ms"],
        )
    )
    decision = decide(LoadedRun.load(out / "baseline"), LoadedRun.load(out / "candidate"), policy)
    print()
    for cell in decision["cells"]:
        for gate in cell["gates"]:
            if gate["gate"] in ("latency_p50", "latency_p95", "throughput"):
                print(f"{cell['cell_id']} {gate['gate']}: {gate['verdict']} — {gate['message']}")
    print(f"\nrounds {args.rounds}, busy in rounds {sorted(busy)}; wall time {wall:.0f} s; {out}")


if __name__ == "__main__":
    main()
