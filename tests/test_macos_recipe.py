"""The macOS recipe's A/B path (images/macos/ab.sh), rehearsed on the CPU with --backend cpu:
one `ab` of two pinned venv sides, as the mps jobs run it, with a plugin whose cells say part of
them ran on the CPU. The fallback gate fails it under the built-in policy and passes it where
a policy allows fallback. MPS itself is untested on hardware here."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from suite.core.yamlsafe import load_yaml
from tests.helpers import REPO
from tests.plugins.falls_back import MESSAGE

pytestmark = pytest.mark.slow


def _gate(decision: dict[str, object], name: str) -> dict[str, object]:
    (cell,) = [c for c in decision["cells"] if c["workload"] == "falls_back"]  # type: ignore[index,union-attr]
    (gate,) = [g for g in cell["gates"] if g["gate"] == name]
    return gate  # type: ignore[no-any-return]


def test_the_recipe_decides_and_the_fallback_gate_reads_the_record(tmp_path: Path) -> None:
    import torch

    version = torch.__version__.split("+")[0]
    matrix = tmp_path / "matrix.yml"
    plugin = REPO / "tests" / "plugins" / "falls_back.py"
    matrix.write_text(
        f"version: 1\nname: mac\nbackends: [cpu]\nworkloads:\n  - workload: {plugin}:FallsBack\n"
    )
    out = tmp_path / "ab"
    env = {**os.environ, "TORCH_MATRIX_PYTHON": sys.executable, "PYTHON": sys.executable}
    proc = subprocess.run(
        ["bash", str(REPO / "images" / "macos" / "ab.sh"), "--backend", "cpu",
         "--baseline", version, "--candidate", version, "--",
         "--matrix", str(matrix), "--rounds", "2", "--out", str(out), "--no-traces"],
        capture_output=True, text=True, timeout=1200, env=env, check=False,
    )  # fmt: skip
    decision = json.loads((out / "decision.json").read_text())
    assert decision["baseline"]["torch"].startswith(version), proc.stderr[-3000:]
    assert decision["baseline"]["interpreter"] != sys.executable  # a venv side of ab's own
    gate = _gate(decision, "fallback")
    assert gate["verdict"] == "fail" and gate["severity"] == "hard"
    assert MESSAGE in str(gate["message"]) and "the baseline too" in str(gate["message"])
    assert decision["decision"] in ("defer", "rollback")  # a hard gate failed on the fleet's cpu
    assert proc.returncode == {"defer": 5, "rollback": 6}[decision["decision"]], proc.stderr[-3000:]

    # The same records under a policy that allows fallback: passed, and named.
    policy = load_yaml((REPO / "suite" / "data" / "default-policy.yaml").read_text())
    policy["profiles"]["research"]["gates"]["fallback"]["allow"] = True
    allowing = tmp_path / "policy.json"
    allowing.write_text(json.dumps(policy))
    again = tmp_path / "again.json"
    subprocess.run(
        [sys.executable, "-m", "suite", "compare", str(out / "baseline"), str(out / "candidate"),
         "--policy", str(allowing), "--format", "json", "--out", str(again)],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    allowed = _gate(json.loads(again.read_text()), "fallback")
    assert allowed["verdict"] == "pass" and "allowed by the policy" in str(allowed["message"])
