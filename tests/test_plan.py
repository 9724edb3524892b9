"""The CI planner: cells packed into GitHub Actions matrix jobs, and the `plan` command."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from suite.cli.ci import plan_command
from suite.core.errors import InputError
from suite.core.spec import CellSpec
from suite.flows.plan import (
    COMPILED_COST,
    GITHUB_MAX_JOBS,
    cell_cost,
    default_runners,
    plan,
    typical_runners,
    unplanned,
    unplanned_note,
)
from suite.workloads.matrix import Matrix, expand, load_matrix, select

REPO = Path(__file__).resolve().parent.parent


def matrix(runners: dict[str, list[str]] | None = None) -> Matrix:
    """A matrix whose every backend has runners named (the typical labels), unless given."""
    return Matrix(
        name="synthetic",
        file="synthetic.yaml",
        sha256="0" * 64,
        profile="smoke",
        backends=("cpu", "cuda", "rocm", "mps"),
        timeout_s=600.0,
        entries=[],
        runners={b: list(v) for b, v in typical_runners().items()} if runners is None else runners,
    )


def cells(n: int, backends: tuple[str, ...] = ("cpu",), mode: str = "eager") -> list[CellSpec]:
    return [
        CellSpec(
            workload="w", ref="w", params=(("i", i), ("mode", mode)), backend=b, profile="smoke"
        )
        for i in range(n)
        for b in backends
    ]


def ids_by_job(strategy: dict[str, Any]) -> list[list[str]]:
    return [job["cells"].split(" ") for job in strategy["include"]]


def test_one_cell_per_job_when_it_fits_with_default_labels() -> None:
    runners = {"cuda": ["self-hosted", "linux", "cuda"]}
    strategy = plan(matrix(runners), cells(2, ("cpu", "cuda")))
    labels = {"cpu": list(default_runners()["cpu"]), "cuda": runners["cuda"]}
    assert strategy == {
        "include": [
            {
                "job": f"{backend}-{n}",
                "backend": backend,
                "runs-on": labels[backend],
                "cells": f"w.{n - 1}.eager@{backend}",
                "cell_count": 1,
            }
            for backend in ("cpu", "cuda")
            for n in (1, 2)
        ]
    }
    assert default_runners() == {"cpu": ("self-hosted", "linux", "x64")}


def test_a_backend_without_runners_is_not_planned_and_the_note_says_how_to_plan_it() -> None:
    selected = cells(3, ("cpu", "cuda", "mps"))
    strategy = plan(matrix({}), selected)
    assert {job["backend"] for job in strategy["include"]} == {"cpu"}
    assert unplanned(matrix({}), selected) == {"cuda": 3, "mps": 3}
    note = unplanned_note(unplanned(matrix({}), selected))
    assert note.startswith("not planned, no runners named: cuda (3 cells), mps (3 cells)")
    assert "cuda: [self-hosted, linux, cuda]" in note and "mps: [self-hosted, macOS, ARM64]" in note
    # Labels named by plan's runners (the workflow's input) plan it, over the matrix's.
    given = {"cuda": ["self-hosted", "linux", "h100"]}
    named = plan(matrix({"cuda": ["x"]}), selected, runners=given)
    assert {tuple(j["runs-on"]) for j in named["include"] if j["backend"] == "cuda"} == {
        ("self-hosted", "linux", "h100")
    }
    assert unplanned(matrix({}), selected, given) == {"mps": 3}
    with pytest.raises(InputError, match="nothing to plan, no runners named: cuda"):
        plan(matrix({}), cells(1, ("cuda",)))


def test_runner_labels_come_from_the_matrix() -> None:
    runners = {"cuda": ["self-hosted", "linux", "a100"]}
    strategy = plan(matrix(runners), cells(1, ("cpu", "cuda")))
    labels = {job["backend"]: job["runs-on"] for job in strategy["include"]}
    assert labels == {
        "cpu": ["self-hosted", "linux", "x64"],
        "cuda": ["self-hosted", "linux", "a100"],
    }


def test_600_cells_fit_256_jobs_each_cell_once_one_backend_per_job() -> None:
    selected = cells(200, ("cpu", "cuda", "rocm"))
    strategy = plan(matrix(), selected, max_jobs=GITHUB_MAX_JOBS)
    jobs = strategy["include"]
    assert len(jobs) == GITHUB_MAX_JOBS
    placed = [cell for job in ids_by_job(strategy) for cell in job]
    assert sorted(placed) == sorted(c.cell_id for c in selected)  # every cell exactly once
    for job, ids in zip(jobs, ids_by_job(strategy), strict=True):
        assert {i.rsplit("@", 1)[1] for i in ids} == {job["backend"]}
        assert job["cell_count"] == len(ids)
    # Balanced by count when costs are equal: no job holds more than one cell above another.
    counts = [job["cell_count"] for job in jobs]
    assert max(counts) - min(counts) <= 1
    assert len({job["job"] for job in jobs}) == len(jobs)


def test_output_is_deterministic_and_keeps_matrix_order_within_a_job() -> None:
    selected = cells(97, ("cuda", "cpu")) + cells(5, ("cpu",), mode="compiled")
    first = plan(matrix(), selected, max_jobs=7)
    assert json.dumps(first) == json.dumps(plan(matrix(), list(selected), max_jobs=7))
    order = {c.cell_id: i for i, c in enumerate(selected)}
    for ids in ids_by_job(first):
        assert [order[i] for i in ids] == sorted(order[i] for i in ids)
    assert first["include"][0]["backend"] == "cuda"  # the first-seen backend comes first


def test_costly_cells_are_spread_and_draw_more_jobs() -> None:
    compiled = cells(8, ("cuda",), mode="compiled")
    assert cell_cost(compiled[0]) == COMPILED_COST
    assert cell_cost(CellSpec("w", "w", (), "cpu", "smoke", ranks=2)) == 2
    strategy = plan(matrix(), cells(8, ("cpu",)) + compiled, max_jobs=10)
    per_backend = Counter(job["backend"] for job in strategy["include"])
    assert per_backend["cuda"] > per_backend["cpu"]
    mixed = cells(4, ("cpu",)) + cells(4, ("cpu",), mode="compiled")
    [one, two] = ids_by_job(plan(matrix(), mixed, max_jobs=2))
    assert Counter("compiled" in i for i in one) == Counter("compiled" in i for i in two)


def test_cells_per_job_caps_every_job() -> None:
    strategy = plan(matrix(), cells(10, ("cpu", "rocm")), cells_per_job=3)
    assert [job["cell_count"] for job in strategy["include"]] == [3, 3, 2, 2] * 2
    with pytest.raises(InputError, match="exceed"):
        plan(matrix(), cells(10, ("cpu", "rocm")), cells_per_job=3, max_jobs=7)


def test_what_cannot_fit_is_an_input_error() -> None:
    with pytest.raises(InputError, match="4 backends"):
        plan(matrix(), cells(1, ("cpu", "cuda", "rocm", "mps")), max_jobs=3)
    with pytest.raises(InputError, match="max jobs"):
        plan(matrix(), cells(1), max_jobs=GITHUB_MAX_JOBS + 1)
    with pytest.raises(InputError, match="nothing to plan, no runners named: xpu"):
        plan(matrix(), [CellSpec("w", "w", (), "xpu", "smoke")])
    with pytest.raises(InputError, match="no cells"):
        plan(matrix(), [])


def test_duplicate_cells_run_once() -> None:
    strategy = plan(matrix(), cells(3) + cells(3))
    assert sum(job["cell_count"] for job in strategy["include"]) == 3


def test_built_in_matrix_plans_its_cpu_cells_and_names_the_backends_without_runners() -> None:
    built_in = load_matrix(None)
    selected, _ = expand(built_in)
    strategy = plan(built_in, selected, max_jobs=8)
    cpu = [c for c in selected if c.backend == "cpu"]
    assert len(strategy["include"]) == 8
    assert sum(job["cell_count"] for job in strategy["include"]) == len(cpu)
    assert {job["backend"] for job in strategy["include"]} == {"cpu"}
    # No job waits on labels no runner has: the GPU and macOS cells are named, not queued.
    per_backend = len(selected) // 4
    assert unplanned(built_in, selected) == {
        "cuda": per_backend,
        "rocm": per_backend,
        "mps": per_backend,
    }
    gpus = {"cuda": ["self-hosted", "linux", "h100"], "mps": ["self-hosted", "macOS"]}
    named = plan(built_in, selected, max_jobs=8, runners=gpus)
    assert {job["backend"] for job in named["include"]} == {"cpu", "cuda", "mps"}


def readme_matrix() -> str:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    section = text[text.index("## Matrix files") :]
    found = re.search(r"```yaml\n(.*?)```", section, re.DOTALL)
    assert found is not None
    return found[1]


def test_readme_example_matrix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)  # the example names examples/sink_mask.py from the checkout
    path = tmp_path / "nightly.yaml"
    path.write_text(readme_matrix())  # it names its cuda runners
    example = select(load_matrix(path), [], [], None)
    selected, _ = expand(example)
    strategy = plan(example, selected, max_jobs=3)
    jobs = strategy["include"]
    assert [job["backend"] for job in jobs] == ["cpu", "cpu", "cuda"]
    assert jobs[-1]["runs-on"] == ["self-hosted", "linux", "h100"]
    assert jobs[0]["runs-on"] == ["self-hosted", "linux", "x64"]
    placed = " ".join(job["cells"] for job in jobs).split()
    assert sorted(placed) == sorted(c.cell_id for c in selected)
    assert any(i.startswith("sink_mask") for i in placed)


def test_plan_cli_prints_one_line_and_writes_github_output(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "github_output"
    monkeypatch.setenv("GITHUB_OUTPUT", str(out))
    argv = ["--backend", "cpu", "--workload", "sdpa", "--max-jobs", "2"]
    result = CliRunner().invoke(plan_command, argv, catch_exceptions=False)
    assert result.exit_code == 0, result.stderr
    [line] = result.stdout.splitlines()
    strategy = json.loads(line)
    assert [job["job"] for job in strategy["include"]] == ["cpu-1", "cpu-2"]
    assert out.read_text() == (
        f"matrix={line}\nname=default\nunplanned=\nmatrix_note=\nsource_notes=\npin_notes=\n"
    )


def test_plan_names_the_cells_a_pull_requests_matrix_adds_and_removes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The base's matrix is planned (all of its cells); the head's only feeds the note."""
    out = tmp_path / "github_output"
    monkeypatch.setenv("GITHUB_OUTPUT", str(out))
    head = "version: 1\nname: pr\nbackends: [cpu]\nworkloads:\n  - workload: sdpa\n"
    base = tmp_path / "matrix.yml"
    base.write_text(head + "    grid: {mask: [causal, none], dtype: [fp32]}\n")
    head_file = tmp_path / "head.yml"
    head_file.write_text(head + "    grid: {mask: [causal], dtype: [fp32, bf16]}\n")
    argv = ["--matrix", str(base), "--head-matrix", str(head_file)]
    result = CliRunner().invoke(plan_command, argv, catch_exceptions=False)
    assert result.exit_code == 0, result.stderr
    planned = " ".join(j["cells"] for j in json.loads(result.stdout)["include"]).split()
    assert any(".none." in c for c in planned)  # the removed cells still run
    assert not any(".bf16." in c for c in planned)  # the added ones do not, yet
    (note,) = [x for x in out.read_text().splitlines() if x.startswith("matrix_note=")]
    assert f"changes {base}; the base branch's matrix ran" in note
    assert "removes 1 cell, which still ran: sdpa.none.fp32" in note
    assert "adds 1 cell, which run once it merges: sdpa.causal.bf16" in note
    head_file.write_text("version: 1\nworkloads: [{workload: nope}]\n")
    result = CliRunner().invoke(plan_command, argv, catch_exceptions=False)
    assert result.exit_code == 0, result.stderr
    assert "names 1 workload(s) new in it, not imported and not run: nope" in out.read_text()
    head_file.write_text("version: 1\nworkloads: 3\n")
    result = CliRunner().invoke(plan_command, argv, catch_exceptions=False)
    assert result.exit_code == 0, result.stderr  # the head's broken matrix does not stop it
    assert "which does not load there" in out.read_text()


def test_plan_names_the_matrix_for_artifact_names_with_unsafe_characters_replaced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "github_output"
    monkeypatch.setenv("GITHUB_OUTPUT", str(out))
    matrix = tmp_path / "nightly gpu:all.yaml"  # no name: field, so the file's stem
    matrix.write_text("version: 1\nbackends: [cpu]\nworkloads:\n  - workload: sdpa\n")
    result = CliRunner().invoke(plan_command, ["--matrix", str(matrix)], catch_exceptions=False)
    assert result.exit_code == 0, result.stderr
    assert "name=nightly-gpu-all" in out.read_text().splitlines()


def test_plan_cli_writes_what_it_did_not_plan_and_refuses_bad_runners(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "github_output"
    monkeypatch.setenv("GITHUB_OUTPUT", str(out))
    argv = ["--workload", "sdpa", "--backend", "cpu", "--backend", "rocm"]
    result = CliRunner().invoke(plan_command, argv, catch_exceptions=False)
    assert result.exit_code == 0, result.stderr
    assert "warning: not planned, no runners named: rocm (4 cells)" in result.stderr
    assert "unplanned=not planned, no runners named: rocm (4 cells)" in out.read_text()
    named = [*argv, "--runners", '{"rocm": ["self-hosted", "linux", "mi300"]}']
    result = CliRunner().invoke(plan_command, named, catch_exceptions=False)
    assert result.exit_code == 0 and "mi300" in result.stdout and "warning" not in result.stderr
    for bad in ("{not json", '{"rocm": "mi300"}', '["mi300"]'):
        result = CliRunner().invoke(plan_command, [*argv, "--runners", bad])
        assert result.exit_code == 2 and "--runners" in result.stderr, (bad, result.stderr)


def test_plan_cli_bad_input_exits_2(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("version: 1\nworkloads: []\n")
    result = CliRunner().invoke(plan_command, ["--matrix", str(bad)], catch_exceptions=False)
    assert result.exit_code == 2 and str(bad) in result.stderr
