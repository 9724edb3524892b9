"""Why a candidate is slower, end to end: a candidate side given as a wrapper script that
plants one more matmul per step (tests/plugins/counted_mm.py). The instructions gate names the
GEMM at the top of what moved, and the latency gate's traces put the matmul at the top of the
op-level difference, in decision.json and in decision.md."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from tests.helpers import TESTS, cli

pytestmark = [pytest.mark.slow, pytest.mark.counting, pytest.mark.alone]  # latency must fail
PLUGIN = f"{TESTS / 'plugins' / 'counted_mm.py'}:CountedMm"
POLICY = """\
version: 1
kind: torch-matrix/policy
default_profile: why
rules:
  - {severity: soft, verdicts: [fail, new-failure], decision: defer,
     reason: "a performance gate regressed beyond its threshold"}
profiles:
  why:
    fleet_backends: [cpu]
    gates:
      status:       {severity: hard, required: true}
      latency_p50:  {severity: soft, threshold: 0.15}
      instructions: {severity: soft, threshold: 0.02}
"""


@pytest.mark.skipif(shutil.which("valgrind") is None, reason="needs Valgrind")
def test_a_planted_matmul_tops_what_moved_and_where_the_time_went(tmp_path: Path) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY)
    wrapper = tmp_path / "python-extra-mm"
    wrapper.write_text(
        f'#!/bin/sh\nexport TORCH_MATRIX_TEST_EXTRA_MM=1\nexec {sys.executable} "$@"\n'
    )
    wrapper.chmod(0o755)
    out = tmp_path / "ab"
    code, stdout, err = cli(
        "ab", "--baseline", sys.executable, "--candidate", str(wrapper), "--workload", PLUGIN,
        "--backend", "cpu", "--rounds", "6", "--policy", str(policy), "--out", str(out),
        "--format", "json",
    )  # fmt: skip
    decision = json.loads(stdout)
    (cell,) = [c for c in decision["cells"] if c["workload"] == "counted_mm"]
    gates = {g["gate"]: g for g in cell["gates"]}
    assert gates["instructions"]["verdict"] == "fail", gates["instructions"]["message"]
    top = gates["instructions"]["moved"][0]["function"].lower()
    assert "gemm" in top or "aten::mm" in top, gates["instructions"]["moved"][:3]
    assert gates["latency_p50"]["verdict"] == "fail", gates["latency_p50"]["message"]
    # The planted matmul: 5 more calls in the 5 profiled steps. Its self time is not asserted:
    # a stall in one side's profiled steps can outweigh it, and a test reads no clock.
    (mm,) = [op for op in cell["ops"] if op["op"] == "aten::mm"]
    assert mm["candidate_calls"] == mm["baseline_calls"] + 5, cell["ops"]
    report = (out / "decision.md").read_text()
    assert "Where the time went" in report and "aten::mm" in report.replace("\\", "")
    assert code != 0, err
