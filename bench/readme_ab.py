"""The README's first command as a new user meets it: a fresh clone, a fresh environment, an
empty cache, then `torch-matrix ab --candidate torch==2.14.1`. Prints, per run, the install time,
the A/B's wall time and its phases (prepare, counting, rounds, second look, rollback), the
decision, and for every timing fail or improvement it reports, the same cell A/B'd alone
(fixed rounds, no counting) beside it: a fail the cell alone does not show is a false one.

    python bench/readme_ab.py [--runs 3] [--candidate torch==2.14.1] [--baseline-torch 2.13.0]
        [--repo .] [--work DIR] [--alone-rounds 8] [--json PATH] [--again]
        [--plant [--plant-fraction 0.03]]

`--again` makes the runs after the first the same user's next command: the first run's clone,
environment and cache (its venvs and kept counts), not fresh ones.

`--candidate torch==2.13.0` makes it an A/A of the whole built-in matrix. `--plant` makes the
candidate the baseline's own environment with a CPU cost planted in one cell (bench/plant/, the
share in --plant-fraction): everything else is an A/A, and the run says whether the planted cell
was caught and by which gates. Run it alone, on a quiet machine: anything beside it is background
load, and the figures then measure that.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

TIMING = ("latency_p50", "latency_p95", "throughput", "compile_time")
MOVED = ("fail", "improved")
PLANT = Path(__file__).resolve().parent / "plant"
PLANTED_CELL = "sdpa.none.fp32.fwd.s256@cpu"  # the inputs bench/plant/sitecustomize.py plants in


def _planted_side(python: Path, work: Path, fraction: float) -> Path:
    """A wrapper that starts the baseline's Python with the plant first on PYTHONPATH."""
    work.mkdir(parents=True, exist_ok=True)
    wrapper = work / "python"
    wrapper.write_text(
        "#!/bin/sh\n"
        f'export PYTHONPATH="{PLANT}${{PYTHONPATH:+:$PYTHONPATH}}"\n'
        f"export TORCH_MATRIX_PLANT_FRACTION={fraction}\n"
        f'exec "{python}" "$@"\n'
    )
    wrapper.chmod(0o755)
    return wrapper


def _caught(decision: dict[str, Any]) -> dict[str, Any]:
    """What the A/B said of the planted cell: every gate that moved, with its message."""
    for cell in decision["cells"]:
        if cell["cell_id"] == PLANTED_CELL:
            moved = {g["gate"]: g["message"] for g in cell["gates"] if g["verdict"] in MOVED}
            return {"cell": PLANTED_CELL, "caught": bool(moved), "by": moved}
    return {"cell": PLANTED_CELL, "caught": False, "by": {}, "missing": True}


def _timed(
    argv: list[str], env: dict[str, str] | None = None, cwd: Path | None = None
) -> tuple[float, int, str]:
    began = time.monotonic()
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=cwd, check=False)
    return time.monotonic() - began, proc.returncode, proc.stdout + proc.stderr


def _env(cache: Path) -> dict[str, str]:
    import os

    return {**os.environ, "TORCH_MATRIX_CACHE": str(cache)}


def _fails(decision: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(cell, gate, message) of every timing fail or improvement, the second look's included."""
    found = []
    for cell in decision["cells"]:
        for gate in cell["gates"]:
            looked = (gate.get("second_look") or {}).get("verdict")
            if gate["gate"] in TIMING and (gate["verdict"] in MOVED or looked in MOVED):
                found.append((cell["cell_id"], gate["gate"], gate["message"]))
    return found


def _kept(out: Path) -> str:
    """How many count records of each side were kept from an earlier run."""
    said = []
    for role in ("baseline", "candidate"):
        docs = [json.loads(p.read_text()) for p in (out / role / "counts").glob("*.json")]
        kept = sum(1 for d in docs if (d.get("instructions") or {}).get("kept"))
        said.append(f"{role} {kept} of {len(docs)}")
    return ", ".join(said)


def one_run(args: argparse.Namespace, work: Path, n: int) -> dict[str, Any]:
    # --again: the runs after the first are the same user's next command, in the same clone,
    # environment and cache.
    setup = 1 if args.again else n
    clone, venv, cache = (work / f"{name}-{setup}" for name in ("clone", "env", "cache"))
    out = work / f"ab-{n}"
    python = venv / "bin" / "python"
    install_s = 0.0
    if setup == n:
        subprocess.run(["git", "clone", "-q", str(args.repo), str(clone)], check=True)
        for argv in (
            [sys.executable, "-m", "venv", str(venv)],
            [str(python), "-m", "pip", "install", "-q", f"torch=={args.baseline_torch}", "-e",
             str(clone)],
        ):  # fmt: skip
            took, code, said = _timed(argv)
            install_s += took
            if code != 0:
                raise SystemExit(f"install failed: {' '.join(argv)}\n{said[-2000:]}")
    tm = [str(python), "-m", "suite"]
    candidate = args.candidate
    if args.plant:
        candidate = str(_planted_side(python, work / f"planted-{setup}", args.plant_fraction))
    # In the clone, as its user runs it: `python -m suite` elsewhere imports the suite of
    # whatever folder it starts in.
    ab_s, code, said = _timed(
        [*tm, "ab", "--candidate", candidate, "--out", str(out), "--format", "json"],
        _env(cache),
        cwd=clone,
    )
    decision_path = out / "decision.json"
    if not decision_path.is_file():
        raise SystemExit(f"ab wrote no decision (exit {code}):\n{said[-3000:]}")
    decision = json.loads(decision_path.read_text())
    result: dict[str, Any] = {
        "run": n,
        "install_s": round(install_s, 1),
        "ab_s": round(ab_s, 1),
        "exit": code,
        "decision": decision["decision"],
        "phases": decision.get("phases", {}),
        "packages": (decision.get("comparable") or {}).get("packages", []),
        "reasons": decision.get("reasons", [])[:6],
        "kept": _kept(out),
        "fails": [],
    }
    if args.plant:
        result["plant"] = {**_caught(decision), "fraction": args.plant_fraction}
    for cell_id, gate, message in _fails(decision):
        alone = work / f"alone-{n}-{cell_id}"
        _, _, _ = _timed(
            [*tm, "ab", "--candidate", candidate, "--cell", cell_id, "--rounds",
             str(args.alone_rounds), "--no-count", "--out", str(alone), "--format", "json"],
            _env(cache),
            cwd=clone,
        )  # fmt: skip
        alone_gate = None
        if (alone / "decision.json").is_file():
            again = json.loads((alone / "decision.json").read_text())
            alone_gate = next(
                (g for c in again["cells"] if c["cell_id"] == cell_id for g in c["gates"]
                 if g["gate"] == gate),
                None,
            )  # fmt: skip
        result["fails"].append(
            {
                "cell": cell_id,
                "gate": gate,
                "in_matrix": message,
                "alone": None if alone_gate is None else alone_gate["message"],
                "alone_verdict": None if alone_gate is None else alone_gate["verdict"],
            }
        )
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--candidate", default="torch==2.14.1")
    parser.add_argument("--baseline-torch", default="2.13.0")
    parser.add_argument("--repo", type=Path, default=Path(__file__).resolve().parents[1])
    parser.add_argument("--work", type=Path, default=None)
    parser.add_argument("--alone-rounds", type=int, default=8)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--plant", action="store_true", help=f"plant a CPU cost in {PLANTED_CELL}")
    parser.add_argument("--plant-fraction", type=float, default=0.03)
    parser.add_argument(
        "--again", action="store_true", help="runs after the first reuse its clone, env, cache"
    )
    args = parser.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="readme-ab-"))
    work.mkdir(parents=True, exist_ok=True)
    results = []
    for n in range(1, args.runs + 1):
        result = one_run(args, work, n)
        results.append(result)
        phases = ", ".join(f"{k} {v:.0f} s" for k, v in result["phases"].items())
        print(
            f"run {n}: install {result['install_s']:.0f} s, ab {result['ab_s']:.0f} s "
            f"({phases}); decision {result['decision']} (exit {result['exit']}); counts kept "
            f"from earlier runs: {result['kept']}",
            flush=True,
        )
        for diff in result["packages"]:
            print(f"  package differs: {diff}", flush=True)
        for fail in result["fails"]:
            print(f"  {fail['cell']} {fail['gate']}", flush=True)
            print(f"    in the matrix: {fail['in_matrix']}", flush=True)
            print(f"    alone ({fail['alone_verdict']}): {fail['alone']}", flush=True)
        if not result["fails"]:
            print("  no timing fail or improvement", flush=True)
        if "plant" in result:
            plant = result["plant"]
            print(f"  planted cell {plant['cell']}: caught {plant['caught']}", flush=True)
            for gate, message in plant["by"].items():
                print(f"    {gate}: {message}", flush=True)
    decisions = sorted({r["decision"] for r in results})
    print(f"decisions: {', '.join(r['decision'] for r in results)} (same each time: "
          f"{len(decisions) == 1}); work in {work}")  # fmt: skip
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
