"""Counts kept across runs (suite/execute/kept_counts.py): a count is reused only where the cell,
the code, the build and the counting setup are the same; it says where it came from; what no
key can cover is never reused. End to end: a second A/B of the same sides counts nothing again
and decides on the same numbers."""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from suite.core.results import write_result
from suite.core.spec import CellSpec
from suite.core.validation import validate_file
from suite.execute import kept_counts as kc
from suite.execute.counting import count_file, counting_setup
from suite.execute.environment import RunOptions, worker_env
from suite.flows import counts
from tests.helpers import cli

SDPA = CellSpec(
    workload="sdpa", ref="sdpa", params=(("mask", "none"), ("dtype", "fp32"), ("pass", "fwd")),
    backend="cpu", profile="smoke", lane="production",
)  # fmt: skip
# A plugin's cell, even one whose workload calls itself by a built-in's name.
PLUGIN = CellSpec(
    workload="sdpa", ref="tests/plugins/counted_mm.py:CountedMM", params=(), backend="cpu",
    profile="smoke", lane="production",
)  # fmt: skip


def _counted(run_dir: Path, spec: CellSpec, per_step: float, status: str = "ok") -> Path:
    path = count_file(run_dir, spec, 0)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.with_suffix(".callgrind").write_text("totals: 1000\n")
    path.with_suffix(".functions.tsv").write_text("1000\tat::mm\n")
    doc: dict[str, Any] = {
        "kind": "torch-matrix/result", "schema_version": 1, "run_id": "first",
        "cell_id": spec.cell_id, "spec": spec.as_dict(),
        "spec_hash": spec.spec_hash, "round": 0, "status": status, "failure": None,
        "started_at": "2026-12-07T10:00:00Z", "finished_at": "2026-12-07T10:00:09Z",
        "wall_s": 9.0, "harness": {"parent_wall_s": 9.5},
        "instructions": {
            "steps": 1, "warmup_calls": 2, "threads": 1, "capability": "AVX2", "total": 1000,
            "per_step": per_step, "profile": f"counts/{path.stem}.callgrind",
            "functions": f"counts/{path.stem}.functions.tsv",
        },
    }  # fmt: skip
    write_result(path, doc)
    return path


def test_a_kept_count_is_reused_with_its_evidence_and_says_where_it_came_from(
    tmp_path: Path,
) -> None:
    kept = kc.KeptCounts(tmp_path / "cache", "side")
    first = _counted(tmp_path / "first", SDPA, 1234.0)
    kept.keep(SDPA, 0, first, json.loads(first.read_text()))
    again = count_file(tmp_path / "second", SDPA, 0)
    again.parent.mkdir(parents=True)
    doc = kept.reuse(SDPA, 0, again, "second")
    assert doc is not None
    assert validate_file(again) == "torch-matrix/result"
    counted = doc["instructions"]
    assert counted["per_step"] == 1234.0 and doc["run_id"] == "second"
    assert counted["kept"]["run_id"] == "first"
    assert counted["kept"]["counted_at"] == "2026-12-07T10:00:09Z"
    for field in ("profile", "functions"):
        assert (tmp_path / "second" / counted[field]).is_file()
    harness = doc["harness"]
    assert harness["counted_wall_s"] == 9.5 and "parent_wall_s" in harness  # what it cost then
    # The other replicate, another side's key, or a plugin's cell: nothing kept for them.
    assert kept.reuse(SDPA, 1, again, "second") is None
    assert kc.KeptCounts(tmp_path / "cache", "other").reuse(SDPA, 0, again, "x") is None
    assert kept.key(PLUGIN, 0) is None
    # A reused count is not kept again over the one that counted.
    kept.keep(SDPA, 0, again, doc)
    assert (
        json.loads((kept._folder(kept.key(SDPA, 0) or "") / kc.RECORD).read_text())["run_id"]
        == "first"
    )


def test_what_did_not_count_is_never_kept(tmp_path: Path) -> None:
    kept = kc.KeptCounts(tmp_path / "cache", "side")
    failed = _counted(tmp_path / "run", SDPA, 1234.0, status="failed")
    kept.keep(SDPA, 0, failed, json.loads(failed.read_text()))
    assert not (tmp_path / "cache").exists() or not any((tmp_path / "cache").rglob("*.json"))
    unkeyed = kc.KeptCounts(tmp_path / "cache", None, "why")
    ok = _counted(tmp_path / "ok", SDPA, 1.0)
    unkeyed.keep(SDPA, 0, ok, json.loads(ok.read_text()))
    assert unkeyed.reuse(SDPA, 0, ok, "r") is None
    assert not any((tmp_path / "cache").rglob("*.json"))


def _env() -> dict[str, str]:
    return worker_env(RunOptions(out=Path("unused")))


def test_the_side_key_follows_the_build_the_environment_and_the_setup(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("TORCH_MATRIX_CACHE", str(tmp_path))
    setup = counting_setup()
    here = kc.kept_counts(sys.executable, _env(), setup)
    assert here.side_key is not None, here.why
    assert kc.kept_counts(sys.executable, _env(), setup).side_key == here.side_key
    changed = [
        kc.kept_counts(sys.executable, {**_env(), "ATEN_CPU_CAPABILITY": "default"}, setup),
        kc.kept_counts(sys.executable, {**_env(), "TORCH_LOGS": "+dynamo"}, setup),
        kc.kept_counts(sys.executable, _env(), {**setup, "steps": 2}),
        kc.kept_counts(sys.executable, _env(), setup, "sha256:ab", in_container=True),
    ]
    keys = {k.side_key for k in changed}
    assert None not in keys and here.side_key not in keys and len(keys) == len(changed)
    # A docker: side with no digest has no key.
    assert kc.kept_counts(sys.executable, _env(), setup, None, in_container=True).side_key is None


def _interpreter(tmp_path: Path, probe: dict[str, Any]) -> str:
    fake = tmp_path / "python"
    fake.write_text(f"#!/bin/sh\ncat <<'EOF'\n{json.dumps(probe)}\nEOF\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    return str(fake)


@pytest.mark.parametrize(
    ("paths", "dists", "why"),
    [
        (["/elsewhere/src"], [], "sys.path holds /elsewhere/src"),
        ([], [["mylib-1.0.dist-info", "ab", {"url": "file:///src", "dir_info": {"editable": True}}]],
         "mylib-1.0 is an editable install"),
    ],
)  # fmt: skip
def test_a_side_whose_code_no_key_covers_keeps_nothing(
    tmp_path: Path, paths: list[str], dists: list[Any], why: str
) -> None:
    prefix = str(tmp_path / "prefix")
    probe = {"version": "3.11", "executable": "/x/python", "prefixes": [prefix],
             "paths": [f"{prefix}/lib/site-packages", *paths], "dists": dists}  # fmt: skip
    found = kc.kept_counts(_interpreter(tmp_path, probe), _env(), counting_setup())
    assert found.side_key is None and found.why.startswith(why)
    own = [
        ["torch_matrix-0.1.0.dist-info", "cd", {"url": "file:///a", "dir_info": {"editable": True}}]
    ]
    probe = {**probe, "paths": [f"{prefix}/lib/site-packages"], "dists": own}
    assert kc.kept_counts(_interpreter(tmp_path, probe), _env(), counting_setup()).side_key


@pytest.mark.keeps_counts
@pytest.mark.parametrize("keep", [True, False])
def test_recount_keeps_nothing_and_reuses_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, keep: bool
) -> None:
    given: list[Any] = []

    class Counter:
        def __init__(self, *_: Any, kept: Any = None, **__: Any) -> None:
            given.append(kept)

        def count(self, *_: Any) -> None:
            pass

        def close(self, compiled: bool = True) -> None:
            pass

    monkeypatch.setenv("TORCH_MATRIX_CACHE", str(tmp_path))
    monkeypatch.setattr(counts, "Counter", Counter)
    runs = {
        role: SimpleNamespace(dir=tmp_path / role, run_id="r", worker_env=_env(),
                              options=SimpleNamespace(interpreter=sys.executable, launcher=None))
        for role in ("baseline", "candidate")
    }  # fmt: skip
    sides = {role: SimpleNamespace(kind="requirement", image=None) for role in runs}
    counts.count_cells([], runs, sides, None, keep=keep)  # type: ignore[arg-type]
    assert given == []  # nothing to count: no side probed, no counter started
    counts.count_cells([SDPA], runs, sides, None, keep=keep)  # type: ignore[arg-type]
    assert len(given) == 2
    assert (
        all(isinstance(k, kc.KeptCounts) and k.side_key for k in given)
        if keep
        else given == [None, None]
    )


def _counts(out: Path) -> list[dict[str, Any]]:
    return [
        json.loads(p.read_text())
        for role in ("baseline", "candidate")
        for p in sorted((out / role / "counts").glob("*.json"))
    ]


@pytest.mark.slow
@pytest.mark.counting
@pytest.mark.keeps_counts
def test_a_second_ab_of_the_same_sides_counts_nothing_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TORCH_MATRIX_CACHE", str(tmp_path / "cache"))
    matrix = tmp_path / "m.yaml"
    matrix.write_text(
        "version: 1\nname: kept\nbackends: [cpu]\nworkloads:\n"
        "  - workload: sdpa\n    grid: {mask: [causal], dtype: [fp32]}\n"
    )
    decisions, counts = [], []
    for n in range(2):
        out = tmp_path / f"ab{n}"
        code, stdout, err = cli(
            "ab", "--baseline", sys.executable, "--candidate", "current", "--matrix",
            str(matrix), "--rounds", "2", "--out", str(out), "--format", "json",
        )  # fmt: skip
        assert code in (0, 5), err
        decisions.append(json.loads(stdout))
        counts.append(_counts(out))
    gates = [
        next(g for c in d["cells"] for g in c["gates"] if g["gate"] == "instructions")
        for d in decisions
    ]
    assert [g["verdict"] for g in gates] == ["pass"] * 2, gates
    kept = [[bool(d["instructions"].get("kept")) for d in docs] for docs in counts]
    assert kept[1] and all(kept[1]), kept
    assert "counts kept from earlier runs" in gates[1]["message"]
    # The same numbers: a kept count is the count that was made.
    assert abs(gates[1]["baseline"] / gates[0]["baseline"] - 1) < 0.005
    assert os.listdir(tmp_path / "cache" / kc.KEPT_DIR)


def test_a_file_dropped_loose_in_site_packages_changes_the_key(tmp_path: Path) -> None:
    """A sitecustomize.py or .pth file that patches torch belongs to no distribution's RECORD,
    and it changes what a count counts."""
    import subprocess
    import sysconfig

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = str(venv / "bin" / "python")
    before = kc.kept_counts(python, _env(), counting_setup())
    assert before.side_key is not None, before.why
    purelib = sysconfig.get_path("purelib", vars={"base": str(venv), "platbase": str(venv)})
    (Path(purelib) / "sitecustomize.py").write_text("import os\n")
    after = kc.kept_counts(python, _env(), counting_setup())
    assert after.side_key not in (None, before.side_key)
