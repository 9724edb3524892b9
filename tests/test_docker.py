"""Docker sides for real: cells inside containers of the CPU image named by
TORCH_MATRIX_TEST_IMAGE (built by .ci/docker-setup.sh), with --network none, and `repro`'s
printed `docker run` line pasted into a shell."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from suite.cli import plan
from suite.cli_repro import repro
from suite.docker_side import WORKER_LABEL
from suite.results import read_result
from suite.runner import RunOptions, run_matrix
from suite.sides import prepare
from tests.helpers import cli

CELL = "sdpa.none.fp32.fwd.s256@cpu"
IMAGE = os.environ.get("TORCH_MATRIX_TEST_IMAGE", "")


def _docker_works() -> bool:
    if shutil.which("docker") is None:
        return False
    try:
        return subprocess.run(["docker", "info"], capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


pytestmark = [
    pytest.mark.docker,
    pytest.mark.skipif(not _docker_works(), reason="`docker info` fails: no Docker daemon here"),
    pytest.mark.skipif(
        not IMAGE, reason="TORCH_MATRIX_TEST_IMAGE is unset (.ci/docker-setup.sh builds one)"
    ),
]


def _image_ids() -> set[str]:
    inspect = ["docker", "image", "inspect", IMAGE]
    doc = json.loads(subprocess.run(inspect, capture_output=True, check=True).stdout)[0]
    return {doc["Id"], *doc.get("RepoDigests", [])}


@pytest.fixture(autouse=True)
def no_stray_containers() -> Iterator[None]:
    yield
    ps = ["docker", "ps", "-aq", "--filter", f"label={WORKER_LABEL}"]
    assert subprocess.run(ps, capture_output=True, text=True).stdout.strip() == ""


def test_ab_runs_cells_inside_the_image(tmp_path: Path) -> None:
    out = tmp_path / "ab"
    side = f"docker:{IMAGE}"
    code, stdout, stderr = cli(
        "ab", "--baseline", side, "--candidate", side, "--workload", "sdpa",
        "--backend", "cpu", "--cell", CELL, "--rounds", "1", "--out", str(out),
        "--no-traces", "--format", "json",
    )  # fmt: skip
    assert code in (0, 4, 5, 6), stderr
    ids = _image_ids()
    for role in ("baseline", "candidate"):
        record = read_result(out / role / "cells" / f"{CELL}.json")
        log = (out / role / "logs" / f"{CELL}.log").read_text()
        assert record["status"] == "ok", (record["failure"], log[-2000:])
        assert record["image"]["digest"] in ids
        run = json.loads((out / role / "run.json").read_text())
        assert run["environment"]["image"]["digest"] in ids
        assert run["environment"]["interpreter"].startswith("/opt/venv/")  # the image's python
    decision = json.loads(stdout)
    assert decision["comparable"]["ok"], decision["comparable"]


def test_repro_line_reruns_a_failing_cell(tmp_path: Path) -> None:
    side = prepare(f"docker:{IMAGE}", "candidate")
    matrix, cells, resolved = plan(None, ["sdpa"], ["cpu"], [CELL], None)
    run_dir = tmp_path / "run"
    options = RunOptions(
        out=run_dir,
        interpreter=side.interpreter,
        timeout_s=0.001,  # no worker starts that fast: a reliable timeout
        launcher=side.launcher,
        command=["torch-matrix", "run", "--cell", CELL, "--timeout", "0.001"],
    )
    summary = run_matrix(matrix, options, cells=cells, resolved=resolved)
    assert summary.statuses == {CELL: "timeout"}

    printed = CliRunner().invoke(repro, [CELL, "--results", str(run_dir)])
    assert printed.exit_code == 0, printed.output
    line = printed.stdout.strip()
    assert line.startswith("docker run --rm") and "--network none" in line
    pasted = subprocess.run(line, shell=True, capture_output=True, text=True, timeout=900)
    assert pasted.returncode == 1, pasted.stderr  # `run` exits 1: the cell timed out again
    (new,) = (run_dir / "repro" / CELL).glob(f"*/cells/{CELL}.json")
    record = read_result(new)
    assert record["status"] == "timeout"
    assert (
        json.loads((new.parent.parent / "run.json").read_text())["environment"]["image"]["digest"]
        in _image_ids()
    )
    assert read_result(run_dir / "cells" / f"{CELL}.json")["run_id"] == summary.run_id

    ran = CliRunner().invoke(repro, [CELL, "--results", str(run_dir), "--run"])
    assert ran.exit_code == 1, ran.output
    assert len(list((run_dir / "repro" / CELL).glob(f"*/cells/{CELL}.json"))) == 2
    assert "status timeout, was timeout" in ran.stdout


def test_missing_image_is_an_environment_problem(tmp_path: Path) -> None:
    code, _, stderr = cli(
        "ab", "--candidate", "docker:torch-matrix/absent:never-built", "--workload", "sdpa",
        "--cell", CELL, "--out", str(tmp_path / "ab"),
    )  # fmt: skip
    assert code == 3, stderr
    assert "torch-matrix/absent:never-built" in stderr and "could not be pulled" in stderr
