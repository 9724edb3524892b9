"""The instructions gate end to end on this machine: `torch-matrix ab` of a step against the same
step with one more matmul on the candidate side (a wrapper interpreter that exports the planted
variable), and an A/A of it; prints each side's counts, their spread, the change, the verdict,
the functions that moved, and the wall time of each phase.

    python bench/instructions.py [--out DIR]

Needs Valgrind. Takes about 10 minutes on a 2-core machine: each side's counting fork server
imports torch under callgrind once (~2 min), then each count costs ~20-40 s.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PLUGIN = f"{ROOT / 'tests' / 'plugins' / 'counted_mm.py'}:CountedMm"
POLICY = """\
version: 1
kind: torch-matrix/policy
default_profile: counted
rules:
  - {severity: soft, verdicts: [fail, new-failure], decision: defer,
     reason: "a performance gate regressed beyond its threshold"}
profiles:
  counted:
    fleet_backends: [cpu]
    gates:
      status:       {severity: hard, required: true}
      instructions: {severity: soft, threshold: 0.02}
"""


def _ab(out: Path, candidate: str, policy: Path) -> tuple[dict[str, object], float]:
    start = time.perf_counter()
    argv = [
        sys.executable, "-m", "suite", "ab", "--candidate", candidate, "--workload", PLUGIN,
        "--backend", "cpu", "--rounds", "1", "--no-traces", "--policy", str(policy),
        "--out", str(out), "--format", "json",
    ]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    took = time.perf_counter() - start
    if not (out / "decision.json").is_file():
        sys.exit(f"ab wrote no decision (exit {done.returncode}):\n{done.stderr[-3000:]}")
    return json.loads((out / "decision.json").read_text()), took


def _report(name: str, decision: dict[str, object], took: float) -> None:
    for cell in decision["cells"]:  # type: ignore[attr-defined]
        for gate in cell["gates"]:
            if gate["gate"] != "instructions":
                continue
            print(
                f"{name}: {cell['cell_id']}: {gate['verdict']} — {gate['message']}; baseline "
                f"{gate.get('baseline')}, candidate {gate.get('candidate')}, spread "
                f"{gate.get('spread')}"
            )
            for moved in gate.get("moved") or []:
                print(f"    {moved['change']:+,} {moved['function'][:110]}")
    print(f"{name}: ab took {took:.0f} s")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    root = args.out or Path(tempfile.mkdtemp(prefix="torch-matrix-instructions-"))
    root.mkdir(parents=True, exist_ok=True)
    policy = root / "policy.yaml"
    policy.write_text(POLICY)
    wrapper = root / "python-extra-mm"
    wrapper.write_text(
        f'#!/bin/sh\nexport TORCH_MATRIX_TEST_EXTRA_MM=1\nexec {sys.executable} "$@"\n'
    )
    wrapper.chmod(0o755)
    _report("A/A", *_ab(root / "aa", sys.executable, policy))
    _report("+1 matmul", *_ab(root / "planted", str(wrapper), policy))


if __name__ == "__main__":
    main()
