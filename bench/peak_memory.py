"""Peak memory on the CPU: does the figure repeat, is a planted allocation seen at its size, and
does the peak_memory gate fail on it and on nothing else?

Each mode runs `torch-matrix ab` on the built-in matrix's CPU cells, with a fixed design of
--rounds rounds (each round a fresh process per side), and reads the records:

    python bench/peak_memory.py aa                 # A/A: this interpreter vs a venv of it
    python bench/peak_memory.py plant --fraction 0.10
    python bench/peak_memory.py plant --fraction 0.25

aa compares this interpreter with a venv that sees its packages (`--system-site-packages`): the
same torch in two environments. It prints, per cell, the spread (max - min over the median) of
the allocator figure across every reading of both sides, and of RSS beside it, and the gate's
verdicts: no peak_memory fail may appear. plant makes a candidate that differs from the baseline
in one thing: a venv that sees this interpreter's packages (`--system-site-packages`) and holds
a .pth whose module, in each worker, holds an extra zero-filled block of FRACTION of the step's
own peak (measured on its third call, a warm-up one) for the whole of every later step. It
prints each cell's measured change beside the planted one and how many cells the gate failed.

Run alone on a quiet machine: the figures are memory, but the run is long and the timings of
the same run are judged too.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

CHECKOUT = Path(__file__).resolve().parent.parent

# The module a planted candidate's .pth imports: it patches the worker's measure() as the
# worker imports it, so that each step holds FRACTION more of its own peak.
PLANTED = """
import importlib.abc, importlib.util, sys

FRACTION = {fraction!r}
SIZED = 3


def _patch(module):
    measure = module.WorkerContext.measure

    def planted_measure(self, fn, *args, **kwargs):
        import torch
        from suite.worker.memory import CpuAllocatorTracker

        # No call of its own: the SIZED-th call, a warm-up one, is measured as the memory pass
        # measures (the call before it primes the tracker) and sets the block; later calls
        # hold it.
        state = {{"calls": 0, "extra": 0}}
        tracker = CpuAllocatorTracker()

        def step():
            state["calls"] += 1
            if state["calls"] == SIZED - 1:
                tracker.start()
            if state["calls"] < SIZED:
                return fn()
            if state["calls"] == SIZED:
                tracker.mark()
                try:
                    return fn()
                finally:
                    tracker.stop()
                    state["extra"] = int(FRACTION * max(0, tracker.peak_bytes))
            hold = torch.zeros(state["extra"], dtype=torch.uint8)
            try:
                return fn()
            finally:
                del hold

        return measure(self, step, *args, **kwargs)

    module.WorkerContext.measure = planted_measure


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != "suite.worker.context":
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(name)
        finally:
            sys.meta_path.insert(0, self)
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            _patch(module)

        spec.loader.exec_module = exec_module
        return spec


sys.meta_path.insert(0, _Finder())
"""


def planted_venv(root: Path, fraction: float | None) -> Path:
    """A candidate that differs from this interpreter only by the planted allocation (none for
    fraction None: the A/A's second venv)."""
    venv = root / "planted"
    subprocess.run(
        [sys.executable, "-I", "-m", "venv", "--system-site-packages", "--without-pip", str(venv)],
        check=True,
    )
    python = venv / "bin" / "python"
    site = subprocess.run(
        [str(python), "-I", "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    if fraction is not None:
        (Path(site) / "torch_matrix_planted.py").write_text(PLANTED.format(fraction=fraction))
        (Path(site) / "torch_matrix_planted.pth").write_text("import torch_matrix_planted\n")
    return python


def run_ab(out: Path, candidate: str, rounds: int) -> float:
    argv = [sys.executable, "-m", "suite", "ab", "--baseline", "current", "--candidate",
            candidate, "--backend", "cpu", "--rounds", str(rounds), "--out", str(out),
            "--no-traces", "--no-count"]  # fmt: skip
    start = time.perf_counter()
    proc = subprocess.run(argv, cwd=CHECKOUT, capture_output=True, text=True, check=False)
    if proc.returncode not in (0, 4, 5):  # adopt/isolate, defer, rollback all decide
        sys.exit(f"ab exited {proc.returncode}:\n{proc.stderr[-3000:]}")
    return time.perf_counter() - start


def readings(out: Path) -> dict[str, dict[str, list[int]]]:
    """cell id -> side -> its rounds' (allocator peak, RSS peak) lists."""
    found: dict[str, dict[str, list[int]]] = {}
    for side in ("baseline", "candidate"):
        for path in sorted((out / side / "cells").rglob("*.json")):
            doc: dict[str, Any] = json.loads(path.read_text())
            memory = doc.get("memory") or {}
            if doc.get("status") != "ok" or "peak_bytes" not in memory:
                continue
            cell = found.setdefault(doc["cell_id"], {})
            cell.setdefault(side, []).append(int(memory["peak_bytes"]))
            cell.setdefault(f"{side}_rss", []).append(int(memory.get("rss_peak_bytes", -1)))
            cell.setdefault("method", []).append(0 if memory["method"] == "cpu-allocator" else 1)
    return found


def spread(values: list[int]) -> float:
    mid = statistics.median(values)
    return (max(values) - min(values)) / mid if mid else 0.0


def verdicts(out: Path) -> dict[str, str]:
    doc = json.loads((out / "decision.json").read_text())
    return {
        c["cell_id"]: g["verdict"]
        for c in doc["cells"]
        for g in c["gates"]
        if g["gate"] == "peak_memory"
    }


def report(out: Path, fraction: float | None, took: float) -> None:
    cells, gate = readings(out), verdicts(out)
    print(f"{'cell':62} {'alloc spread':>12} {'rss spread':>10} {'change':>8}  verdict")
    worst = 0.0
    for cell_id, sides in sorted(cells.items()):
        both = sides.get("baseline", []) + sides.get("candidate", [])
        rss = [r for r in sides.get("baseline_rss", []) + sides.get("candidate_rss", []) if r >= 0]
        if not sides.get("baseline") or not sides.get("candidate"):
            continue
        b, c = statistics.median(sides["baseline"]), statistics.median(sides["candidate"])
        change = c / b - 1 if b else float("nan")
        within = (
            spread(both)
            if fraction is None
            else max(spread(sides["baseline"]), spread(sides["candidate"]))
        )
        worst = max(worst, within)
        print(f"{cell_id[:62]:62} {within:12.3%} {spread(rss) if rss else 0:10.1%} "
              f"{change:+8.2%}  {gate.get(cell_id, '-')}")  # fmt: skip
    fails = sum(v == "fail" for v in gate.values())
    decided = len(gate)
    print(f"\n{len(cells)} cells with readings; peak_memory fail in {fails} of {decided}; "
          f"largest allocator spread {worst:.3%}; ab took {took:.0f} s")  # fmt: skip
    if fraction is not None:
        print(f"planted: +{fraction:.0%} of each step's own peak")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("mode", choices=("aa", "plant"))
    parser.add_argument("--fraction", type=float, default=0.25)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--keep", type=Path, help="Keep the ab output here.")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="peak-memory-") as tmp:
        root = Path(tmp)
        out = args.keep or root / "ab"
        planted = args.fraction if args.mode == "plant" else None
        candidate = str(planted_venv(root, planted))
        took = run_ab(out, candidate, args.rounds)
        report(out, args.fraction if args.mode == "plant" else None, took)
    return 0


if __name__ == "__main__":
    sys.exit(main())
