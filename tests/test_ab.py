"""ab end to end: an A/A on this interpreter, and a real torch 2.13.0 vs 2.14.1 A/B when the
candidate can be installed here (set TORCH_MATRIX_AB_CANDIDATE=skip to leave it out)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from suite.core.validation import validate_file
from suite.judge.rules import EXIT_CODES
from suite.judge.sequential import STEADY_STATE_GATES
from tests.helpers import cli

pytestmark = pytest.mark.slow
LATENCY = STEADY_STATE_GATES


def _matrix(tmp_path: Path) -> Path:
    matrix = tmp_path / "m.yaml"
    matrix.write_text(
        "version: 1\nname: ab-test\nbackends: [cpu]\nworkloads:\n"
        "  - workload: sdpa\n    grid: {mask: [causal], dtype: [fp32]}\n"
        "  - workload: mlp_train\n"
    )
    return matrix


@pytest.mark.counting
def test_a_a_has_no_latency_failures(tmp_path: Path) -> None:
    out = tmp_path / "aa"
    code, stdout, err = cli(
        "ab",
        "--baseline",
        sys.executable,
        "--candidate",
        "current",
        "--matrix",
        str(_matrix(tmp_path)),
        "--rounds",
        "3",
        "--out",
        str(out),
        "--format",
        "json",
    )
    decision = json.loads(stdout)
    assert code == EXIT_CODES[decision["decision"]], err
    assert validate_file(out / "decision.json") == "torch-matrix/decision"
    gates = [g for c in decision["cells"] for g in c["gates"]]
    assert [g for g in gates if g["gate"] in LATENCY and g["verdict"] == "fail"] == []
    assert {g["verdict"] for g in gates if g["gate"] == "status"} == {"pass"}
    assert {g["verdict"] for g in gates if g["gate"] == "drift"} == {"pass"}
    rollback = [g for c in decision["cells"] if c["workload"] == "rollback" for g in c["gates"]]
    assert len(rollback) == 5 and {g["verdict"] for g in rollback} == {"pass"}
    assert decision["rollback"]["duration_s"] > 0
    for name in ("decision.md", "junit.xml"):
        assert (out / name).stat().st_size > 0
    base = json.loads((out / "baseline" / "run.json").read_text())
    assert base["side"] == "baseline" and base["policy"]["sha256"] == decision["policy"]["sha256"]
    assert len({c["round"] for c in base["cells"]}) == 3
    # The built-in profile reports instructions: both CPU cells counted, reproducible, unchanged.
    counted = [g for g in gates if g["gate"] == "instructions"]
    assert len(counted) == 2 and {g["verdict"] for g in counted} == {"pass"}, counted
    assert all("callgrind" in g["message"] and "1 thread" in g["message"] for g in counted)
    assert {"prepare", "setup", "counting", "rounds", "rollback"} <= set(decision["phases"])
    # The rollback checks ran on the core the side done counting first left, not beside rounds.
    assert decision["phases_beside"] == {"rollback": "counting"}


@pytest.mark.skipif(
    os.environ.get("TORCH_MATRIX_AB_CANDIDATE") == "skip", reason="TORCH_MATRIX_AB_CANDIDATE=skip"
)
def test_real_pin_bump_2_13_to_2_14(tmp_path: Path) -> None:
    import torch

    if not torch.__version__.startswith("2.13.0"):
        pytest.skip(f"the baseline here is torch {torch.__version__}, not 2.13.0")
    out = tmp_path / "ab"
    code, stdout, err = cli(
        "ab",
        "--candidate",
        "torch==2.14.1",
        "--matrix",
        str(_matrix(tmp_path)),
        "--rounds",
        "2",
        "--out",
        str(out),
        "--format",
        "json",
    )
    if code == 3 and "could not prepare an environment" in err:
        pytest.skip(f"torch 2.14.1 cannot be installed here: {err.splitlines()[-1]}")
    decision = json.loads(stdout)
    assert code == EXIT_CODES[decision["decision"]], err
    assert decision["baseline"]["torch"].startswith("2.13.0")
    assert decision["candidate"]["torch"].startswith("2.14.1")
    assert {c["cell_id"] for c in decision["cells"] if c["workload"] != "rollback"} == {
        "sdpa.causal.fp32.fwd.s256@cpu",
        "mlp_train.eager.fp32.b64h256@cpu",
    }
    checkpoints = decision["rollback"]["checkpoints"]
    assert checkpoints["candidate-to-baseline"]["written_by"].startswith("2.14.1")
    # Counting is off here (TORCH_MATRIX_COUNT=0): the gate says so, it does not pass.
    uncounted = [g for c in decision["cells"] for g in c["gates"] if g["gate"] == "instructions"]
    assert len(uncounted) == 2 and {g["verdict"] for g in uncounted} == {"untested"}
    assert all(g["message"].startswith("not counted") for g in uncounted)
