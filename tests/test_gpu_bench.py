"""The prepared GPU check (bench/gpu/run.py) runs here up to the device: the wheel set for the
GPU machine's Python is complete and fits what travels, the CUDA cells are recorded as skipped
with the reason, and what comes back fits its limits. CI fetches the wheels first
(bench/gpu/fetch_wheels.py) and names the folder in TORCH_MATRIX_GPU_WHEELS."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from tests.helpers import REPO

SCRIPT = REPO / "bench" / "gpu" / "run.py"


@pytest.fixture(scope="module")
def wheels() -> Path:
    folder = os.environ.get("TORCH_MATRIX_GPU_WHEELS")
    if not folder:
        pytest.skip("set TORCH_MATRIX_GPU_WHEELS to a folder from bench/gpu/fetch_wheels.py")
    return Path(folder)


def _check(out: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), str(out), *args], cwd=REPO, capture_output=True,
        text=True, timeout=900, check=False,
    )  # fmt: skip


def test_the_dry_run_prepares_every_step_and_packs_what_comes_back(
    tmp_path: Path, wheels: Path
) -> None:
    out = tmp_path / "out"
    done = _check(out, "--wheels", str(wheels), "--dry-run")
    assert done.returncode == 0, done.stdout + done.stderr
    files = sorted(p.name for p in out.iterdir())
    assert files == ["evidence.tar.gz", "steps.json", "summary.md"]
    assert all(p.stat().st_size <= 16 * 2**20 for p in out.iterdir())
    steps = {s["name"]: s for s in json.loads((out / "steps.json").read_text())}
    assert [*steps] == ["deps", "env", "memory", "detect", "matrix"]
    assert steps["deps"]["status"] == "ok"
    assert any(w.startswith("jsonschema-") for w in steps["deps"]["found"]["wheels"])
    assert steps["env"]["found"]["cuda_available"] is False
    assert steps["detect"]["status"] == "not-run" and "needs the device" in steps["detect"]["why"]
    cells = steps["matrix"]["found"]["cells"]
    # every workload of the check is planned, and each CUDA cell says why it did not run
    assert {c.split(".")[0] for c in cells} >= {
        "flex_attention", "sdpa", "linear_cross_entropy", "mlp_train", "compile", "export",
        "determinism", "cutedsl",
    }  # fmt: skip
    assert "compile.block.mark_dynamic.reduce-overhead.d64@cuda" in cells
    assert all(c["status"] == "skipped" and c["why"] for c in cells.values())
    assert set(steps["memory"]["found"]["cells"]) == {
        f"known_alloc.{m}@cuda" for m in (64, 256, 1024)
    }
    with tarfile.open(out / "evidence.tar.gz") as tar:
        names = tar.getnames()
    assert "env.json" in names and "steps.json" in names
    assert any(n.startswith("run-matrix/cells/") for n in names)


def test_an_incomplete_wheel_set_is_refused_naming_what_is_missing(
    tmp_path: Path, wheels: Path
) -> None:
    partial = tmp_path / "wheels"
    partial.mkdir()
    for wheel in wheels.glob("*.whl"):
        if not wheel.name.startswith("rpds_py"):
            shutil.copy2(wheel, partial)
    done = _check(tmp_path / "out", "--wheels", str(partial), "--dry-run", "--steps", "memory")
    assert done.returncode == 2
    assert f"{partial}: the wheels do not cover" in done.stderr
    assert "rpds" in done.stderr.lower()


def test_a_wheel_for_another_python_is_named(tmp_path: Path) -> None:
    folder = tmp_path / "wheels"
    folder.mkdir()
    (folder / "rpds_py-0.1-cp311-cp311-manylinux_2_17_x86_64.whl").write_bytes(b"")
    done = _check(tmp_path / "out", "--wheels", str(folder), "--dry-run")
    assert done.returncode == 2
    assert "not for CPython 3.12 on Linux x86-64: rpds_py-0.1-cp311" in done.stderr


def test_a_folder_that_holds_something_is_left_alone(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("earlier evidence")
    done = _check(out, "--dry-run", "--steps", "memory")
    assert done.returncode == 2 and "not empty" in done.stderr
    assert (out / "keep.txt").read_text() == "earlier evidence"
    done = _check(tmp_path / "new", "--dry-run", "--steps", "nope")
    assert done.returncode == 2 and "--steps: no step 'nope'" in done.stderr
