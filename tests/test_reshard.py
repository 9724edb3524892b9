"""Resharding: a DCP checkpoint saved by FSDP2 at world 2 loads at world 4, back at 2, and in
one process with no process group (2 -> 4 -> 1), each with the state first saved; a planted
shard lost in the resharding fails every check after it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers import cli

pytestmark = pytest.mark.slow
CHECKS = {"reshard_2_to_4", "reshard_4_to_2", "reshard_4_to_1"}


def test_a_checkpoint_saved_at_world_2_loads_at_4_2_and_1_and_a_lost_shard_fails(
    tmp_path: Path,
) -> None:
    matrix = tmp_path / "m.yaml"
    matrix.write_text(
        "version: 1\nbackends: [cpu]\nworkloads:\n  - workload: reshard\n"
        "    grid: {bug: [none, drop_shard]}\n    timeout: 300\n"
    )
    out = tmp_path / "run"
    code, _, err = cli("run", "--matrix", str(matrix), "--out", str(out))
    assert code == 1, err  # the planted bug fails its cell
    clean = json.loads((out / "cells" / "reshard.none.d256.n1x4@cpu.json").read_text())
    assert clean["status"] == "ok", clean["failure"]
    checks = {c["label"]: c["passed"] for c in clean["correctness"]["checks"]}
    assert checks == dict.fromkeys(CHECKS, True)
    for name in CHECKS:
        assert clean["metrics"][f"{name}_max_abs_diff"]["value"] == 0.0
    assert len(clean["ranks"]) == 4 and clean["timing"]["summary"]["n"] >= 1
    planted = json.loads((out / "cells" / "reshard.drop_shard.d256.n1x4@cpu.json").read_text())
    assert planted["status"] == "failed"
    assert {c["label"] for c in planted["correctness"]["checks"] if not c["passed"]} == CHECKS
