"""The rollback gate: a planted incompatible checkpoint fails it, with the reason."""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from suite import rollback
from suite.launch import Outcome, run_process
from suite.rollback_gate import compatibility
from suite.runner import RunOptions, worker_env
from suite.sides import Side


def _rename_keys(folder: Path) -> None:
    state = torch.load(folder / "state_dict.pt", weights_only=True)
    state["model"] = {f"renamed.{k}": v for k, v in state["model"].items()}
    torch.save(state, folder / "state_dict.pt")


class _Run:
    def __init__(self, tmp: Path) -> None:
        self.worker_env = worker_env(RunOptions(out=tmp))


def _side(planted: bool) -> Side:
    def launcher(
        argv: Sequence[str],
        *,
        log_path: Path,
        timeout_s: float,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
        memory_limit_bytes: int | None = None,
    ) -> Outcome:
        outcome = run_process(argv, log_path=log_path, timeout_s=timeout_s, env=env)
        if planted and "write" in argv:
            _rename_keys(Path(argv[argv.index("--into") + 1]))
        return outcome

    return Side("current", "current", sys.executable, 0.0, "current", launcher=launcher)


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
    cells, reports = compatibility(sides, tmp_path)
    verdicts = {c["cell_id"]: c["gates"][0] for c in cells}
    bad = verdicts["rollback.checkpoint.torch_save.candidate-to-baseline@any"]
    assert bad["verdict"] == "fail" and "Missing key(s)" in bad["message"]
    assert verdicts["rollback.checkpoint.dcp.candidate-to-baseline@any"]["verdict"] == "pass"
    assert verdicts["rollback.checkpoint.torch_save.baseline-to-candidate@any"]["verdict"] == "pass"
    assert set(reports) == {"candidate-to-baseline", "baseline-to-candidate"}
