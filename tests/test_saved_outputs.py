"""Drift between saved outputs: measured where torch is, kept beside the files, and read back
by a job without torch (the aggregate) only while both files are the ones measured."""

from __future__ import annotations

import builtins
import json
import math
from pathlib import Path
from typing import Any

import pytest
import torch

from suite.judge.saved_outputs import FIGURES, NotMeasurable, saved_drift


def _save(path: Path, **tensors: torch.Tensor) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(tensors, path)
    return path


def _without_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    real = builtins.__import__

    def refuse(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "torch" or name.startswith("torch."):
            raise ImportError("no torch here")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", refuse)


def test_a_measured_figure_is_read_back_without_torch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    left = _save(tmp_path / "baseline" / "tensors" / "a.pt", y=torch.tensor([1.0, 2.0, 4.0]))
    right = _save(tmp_path / "candidate" / "tensors" / "a.pt", y=torch.tensor([1.0, 2.0, 4.2]))
    measured = saved_drift(left, right)
    assert measured.name == "y" and measured.relative == pytest.approx(0.05)
    kept = json.loads((right.parent / FIGURES).read_text())
    assert len(kept) == 1
    _without_torch(monkeypatch)
    again = saved_drift(left, right)
    assert again == measured


def test_an_infinite_drift_survives_the_round_trip(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    left = _save(tmp_path / "b" / "t" / "a.pt", y=torch.ones(3))
    right = _save(tmp_path / "c" / "t" / "a.pt", z=torch.ones(3))  # y missing on the right
    measured = saved_drift(left, right)
    assert measured.missing and math.isinf(measured.relative)
    json.loads((right.parent / FIGURES).read_text())  # still readable JSON
    _without_torch(monkeypatch)
    again = saved_drift(left, right)
    assert again.missing and math.isinf(again.relative) and again.name == "y"


def test_a_changed_file_is_not_measurable_without_torch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    left = _save(tmp_path / "b" / "t" / "a.pt", y=torch.ones(3))
    right = _save(tmp_path / "c" / "t" / "a.pt", y=torch.ones(3))
    assert saved_drift(left, right).relative == 0.0
    _save(right, y=torch.full((3,), 9.0))  # another candidate output than the one measured
    _without_torch(monkeypatch)
    with pytest.raises(NotMeasurable, match="torch is not installed"):
        saved_drift(left, right)


def test_the_drift_gate_is_untested_not_passed_without_a_figure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from suite.judge.metric_gates import drift
    from suite.judge.policy import Gate

    for side, value in (("baseline", 1.0), ("candidate", 5.0)):
        _save(tmp_path / side / "tensors" / "a.pt", y=torch.full((3,), value))
    records: dict[str, list[Any]] = {
        side: [{"outputs": {"file": "tensors/a.pt"}, "spec": {"params": {"dtype": "fp32"}}}]
        for side in ("baseline", "candidate")
    }
    dirs = (tmp_path / "baseline", tmp_path / "candidate")
    gate = Gate("drift", "hard", relative_tolerance={"fp32": 1e-4})
    _without_torch(monkeypatch)
    judged = drift(gate, records["baseline"], records["candidate"], dirs)
    assert judged is not None and judged["verdict"] == "untested"
    monkeypatch.undo()
    judged = drift(gate, records["baseline"], records["candidate"], dirs)
    assert judged is not None and judged["verdict"] == "fail"  # measured: 4.0 > 1e-4
    # Where the saved files lie is part of the evidence: without it, no figure, no pass.
    judged = drift(gate, records["baseline"], records["candidate"])
    assert judged is not None and judged["verdict"] == "untested"
    assert "folders are not known" in judged["message"]
