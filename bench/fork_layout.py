"""Does a side's fork server fix its workers' speed for a whole run?

A forked worker inherits its server's address-space layout (where the libraries, the heap and
the stack sit): every worker of one server shares one layout, which the kernel randomized once,
when the server started. If a layout can make a cell's step slower (code and data alignment,
cache and branch-predictor aliasing), every round of that side is slowed alike, and paired rounds
cannot cancel it. This starts S fork servers of one interpreter in turn and forks K workers of
one cell from each (`run` with K rounds), then compares the spread of the cell's p50 between
servers with the spread within one, and with K plainly started workers per group
(TORCH_MATRIX_FORK_SERVER=0: each its own exec, its own layout).

    python bench/fork_layout.py [--python PATH] [--cell CELL_ID] [--servers 6] [--forks 4]
        [--modes forked plain] [--json PATH]

Run it alone, on a quiet machine.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from suite.core.results import read_result, read_run
from suite.core.stats import timing_of


def _p50s(out: Path) -> list[float]:
    run = read_run(out / "run.json")
    values = []
    for cell in run["cells"]:
        if cell["status"] != "ok":
            continue
        summary = timing_of(read_result(out / cell["file"]))
        if summary is not None:
            values.append(float(summary["p50"]))
    return values


def group(python: str, cell: str, forks: int, out: Path, forked: bool) -> list[float]:
    """One fork server (or none), `forks` workers of the cell: their p50s."""
    matrix = out.parent / "rounds.py"
    env = {**os.environ, "TORCH_MATRIX_FORK_SERVER": "1" if forked else "0"}
    code = (
        "import sys\n"
        "from pathlib import Path\n"
        "from suite.execute.environment import RunOptions\n"
        "from suite.execute.runner import run_matrix\n"
        "from suite.workloads.matrix import expand, load_matrix\n"
        "matrix = load_matrix(None)\n"
        "cells, resolved = expand(matrix)\n"
        "cells = [c for c in cells if c.cell_id == sys.argv[1]]\n"
        "assert cells, 'no such cell: ' + sys.argv[1]\n"
        "options = RunOptions(out=Path(sys.argv[2]), interpreter=sys.argv[3],\n"
        "                     rounds=tuple(range(int(sys.argv[4]))))\n"
        "run_matrix(matrix, options, cells=cells, resolved=resolved)\n"
    )
    matrix.write_text(code)
    subprocess.run(
        [sys.executable, str(matrix), cell, str(out), python, str(forks)], env=env, check=True
    )
    return _p50s(out)


def _cv(values: list[float]) -> float:
    return statistics.stdev(values) / statistics.mean(values) if len(values) > 1 else math.nan


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--cell", default="linear_cross_entropy.reference.fp32.n1024v4096@cpu")
    parser.add_argument("--servers", type=int, default=6)
    parser.add_argument("--forks", type=int, default=4)
    parser.add_argument("--modes", nargs="+", default=["forked", "plain"])
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="fork-layout-"))
    found: dict[str, list[list[float]]] = {mode: [] for mode in args.modes}
    for s in range(args.servers):  # the modes interleaved, so drift hits both alike
        for mode in args.modes:
            out = work / f"{mode}-{s}"
            values = group(args.python, args.cell, args.forks, out, mode == "forked")
            found[mode].append(values)
            shown = " ".join(f"{v * 1e3:.2f}" for v in values)
            print(f"{mode} group {s}: p50 ms {shown}", flush=True)
    report: dict[str, Any] = {"cell": args.cell, "python": args.python, "modes": {}}
    for mode, groups in found.items():
        medians = [statistics.median(g) for g in groups if g]
        within = statistics.median([_cv(g) for g in groups if len(g) > 1])
        between = _cv(medians)
        report["modes"][mode] = {
            "groups": groups,
            "group_medians_ms": [round(m * 1e3, 3) for m in medians],
            "cv_within": within,
            "cv_between": between,
        }
        print(
            f"{mode}: group medians ms {' '.join(f'{m * 1e3:.2f}' for m in medians)}; "
            f"CV within a group {within:.1%}, between groups {between:.1%}, "
            f"max/min {max(medians) / min(medians) - 1:+.1%}",
            flush=True,
        )
    if args.json is not None:
        args.json.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
