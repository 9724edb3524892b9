"""The rollback gate: a planted incompatible checkpoint fails it, with the reason."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from suite.execute.environment import RunOptions, worker_env
from suite.execute.launch import ProcessExit, Step, run_process
from suite.execute.prepared import PreparedSide
from suite.flows.rollback import compatibility
from suite.judge.rollback import compatibility_cells, judge_rehearsal
from suite.worker import rollback


def _rename_keys(folder: Path) -> None:
    state = torch.load(folder / "state_dict.pt", weights_only=True)
    state["model"] = {f"renamed.{k}": v for k, v in state["model"].items()}
    torch.save(state, folder / "state_dict.pt")


class _Run:
    def __init__(self, tmp: Path) -> None:
        self.worker_env = worker_env(RunOptions(out=tmp))


def _side(planted: bool) -> PreparedSide:
    def launcher(step: Step) -> ProcessExit:
        outcome = run_process(step)
        if planted and "write" in step.argv:
            _rename_keys(Path(step.argv[list(step.argv).index("--into") + 1]))
        return outcome

    return PreparedSide("current", "current", sys.executable, 0.0, "current", launcher=launcher)


def test_read_reports_renamed_keys(tmp_path: Path) -> None:
    rollback.write(tmp_path)
    assert rollback.read(tmp_path)["formats"]["torch_save"]["ok"] is True
    _rename_keys(tmp_path)
    report = rollback.read(tmp_path)
    assert report["formats"]["torch_save"]["ok"] is False
    assert "Missing key(s)" in report["formats"]["torch_save"]["error"]
    assert report["formats"]["dcp"]["ok"] is True  # the other format was not touched


def test_incompatible_checkpoint_fails_the_gate(tmp_path: Path) -> None:
    run: Any = _Run(tmp_path)
    sides = {"baseline": (_side(False), run), "candidate": (_side(True), run)}
    steps = compatibility(sides, tmp_path)
    assert steps["candidate-to-baseline"] == {"write_exit": 0, "read_exit": 0}
    cells, reports = compatibility_cells(tmp_path, steps)
    verdicts = {c["cell_id"]: c["gates"][0] for c in cells}
    bad = verdicts["rollback.checkpoint.torch_save.candidate-to-baseline@any"]
    assert bad["verdict"] == "fail" and "Missing key(s)" in bad["message"]
    assert verdicts["rollback.checkpoint.dcp.candidate-to-baseline@any"]["verdict"] == "pass"
    assert verdicts["rollback.checkpoint.torch_save.baseline-to-candidate@any"]["verdict"] == "pass"
    assert set(reports) == {"candidate-to-baseline", "baseline-to-candidate"}


def _rehearsal_dirs(tmp_path: Path, before: torch.Tensor, after: torch.Tensor) -> tuple[Any, ...]:
    """A baseline cell and its rehearsal, identical but for one saved output."""
    import json

    from suite.workloads.matrix import select_cells as plan

    _, cells, _ = plan(None, ["sdpa"], ["cpu"], ["sdpa.none.fp32.fwd.s256@cpu"], None)
    (spec,) = cells
    dirs = []
    for name, tensor in (("base", before), ("rehearsal", after)):
        folder = tmp_path / name
        (folder / "cells").mkdir(parents=True)
        (folder / "tensors").mkdir()
        torch.save({"out": tensor}, folder / "tensors" / "out.pt")
        doc = {"status": "ok", "outputs": {"file": "tensors/out.pt"}}
        (folder / "cells" / f"{spec.cell_id}.json").write_text(json.dumps(doc))
        dirs.append(folder)
    return [spec.cell_id], dirs[0], dirs[1]


def test_a_nan_in_the_rehearsal_fails_it(tmp_path: Path) -> None:
    from suite.judge.policy import load_policy

    policy = load_policy(None, "research")
    timing = {"duration_s": 1.0, "environment_ready_s": 0.5, "rehearsal_s": 0.5}
    good = torch.ones(4)
    cells, base, again = _rehearsal_dirs(tmp_path / "same", good, good.clone())
    verdict = judge_rehearsal(cells, base, again, policy, timing)["gates"][0]
    assert verdict["verdict"] == "pass"
    for poisoned in (torch.tensor([1.0, float("nan"), 1.0, 1.0]), torch.full((4,), float("inf"))):
        cells, base, again = _rehearsal_dirs(tmp_path / str(poisoned[1].item()), good, poisoned)
        verdict = judge_rehearsal(cells, base, again, policy, timing)["gates"][0]
        assert verdict["verdict"] == "fail", verdict["message"]
        assert "does not reproduce itself" in verdict["message"]


@pytest.mark.slow
def test_a_sharded_fsdp2_checkpoint_round_trips_and_a_lost_shard_fails(tmp_path: Path) -> None:
    """Two processes over gloo save FSDP2 state with DCP; two fresh ones load it and continue
    as the writer did. Without --sharded (a matrix with no distributed cell) it is not run."""
    rollback.write(tmp_path, sharded=True)
    assert "dcp_fsdp2" not in rollback.read(tmp_path)["formats"]
    report = rollback.read(tmp_path, sharded=True)["formats"]["dcp_fsdp2"]
    assert report == {"ok": True, "max_rel_diff": 0.0, "error": None}
    shards = sorted((tmp_path / "dcp_fsdp2").glob("*.distcp"))
    assert len(shards) == 2  # one file per rank
    shards[1].unlink()
    lost = rollback.read(tmp_path, sharded=True)["formats"]["dcp_fsdp2"]
    assert lost["ok"] is False and lost["error"]
    assert rollback.read(tmp_path, sharded=True)["formats"]["dcp"]["ok"] is True
