"""Docker sides for real: cells inside containers of the CPU image named by
TORCH_MATRIX_TEST_IMAGE (built by .ci/docker-setup.sh), with --network none, and `repro`'s
printed `docker run` line pasted into a shell."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from suite.cli.repro import repro
from suite.core.results import read_result
from suite.execute.docker import WORKER_LABEL
from suite.execute.environment import RunOptions
from suite.execute.runner import run_matrix
from suite.execute.sides import prepare
from suite.workloads.matrix import select_cells as plan
from tests.helpers import REPO, adopts_where_decided, cli, docker_works
from tests.plugins.team_bench import FAIL_VAR

CELL = "sdpa.none.fp32.fwd.s256@cpu"
IMAGE = os.environ.get("TORCH_MATRIX_TEST_IMAGE", "")
CANDIDATE = os.environ.get("TORCH_MATRIX_TEST_IMAGE_CANDIDATE", "")
WAYS = ("candidate-to-baseline", "baseline-to-candidate")


pytestmark = [
    pytest.mark.docker,
    pytest.mark.skipif(not docker_works(), reason="`docker info` fails: no Docker daemon here"),
    pytest.mark.skipif(
        not IMAGE, reason="TORCH_MATRIX_TEST_IMAGE is unset (.ci/docker-setup.sh builds one)"
    ),
]


def _image_ids(image: str = IMAGE) -> set[str]:
    inspect = ["docker", "image", "inspect", image]
    doc = json.loads(subprocess.run(inspect, capture_output=True, check=True).stdout)[0]
    return {doc["Id"], *doc.get("RepoDigests", [])}


@pytest.fixture(autouse=True)
def no_stray_containers() -> Iterator[None]:
    yield
    ps = ["docker", "ps", "-aq", "--filter", f"label={WORKER_LABEL}"]
    assert subprocess.run(ps, capture_output=True, text=True).stdout.strip() == ""


def _team_plugin(tmp_path: Path) -> Path:
    """tests/plugins/team_bench.py copied into a folder of its own, outside every run
    directory: a container sees it only through the mount derived for it."""
    plugin = tmp_path / "team-plugins" / "team_bench.py"
    plugin.parent.mkdir()
    shutil.copyfile(REPO / "tests" / "plugins" / "team_bench.py", plugin)
    return plugin


def _image_ab(
    out: Path,
    baseline: str,
    candidate: str,
    plugin: Path,
    *workloads: str,
    rounds: int = 2,
    policy: Path | None = None,
    cells: tuple[str, ...] = (),
) -> tuple[int, dict[str, Any]]:
    code, _, stderr = cli(
        "ab", "--baseline", f"docker:{baseline}", "--candidate", f"docker:{candidate}",
        *(["--policy", str(policy)] if policy else []),
        *(w for cell in cells for w in ("--cell", cell)),
        "--workload", f"{plugin}:TeamBench", *(w for name in workloads for w in ("--workload", name)),
        "--backend", "cpu", "--rounds", str(rounds), "--out", str(out), "--no-traces",
        "--format", "json",
    )  # fmt: skip
    assert (out / "decision.json").is_file(), stderr
    return code, json.loads((out / "decision.json").read_text())


def _check_evidence(
    out: Path,
    decision: dict[str, Any],
    plugin: Path,
    images: dict[str, str],
    rollback_checks: bool = True,
) -> None:
    """Every cell ran in its side's image and passed its status gate, the plugin inside was the
    file outside (same sha256), both checkpoint directions and the rehearsal passed, and no log
    carries an import warning."""
    digest = hashlib.sha256(plugin.read_bytes()).hexdigest()
    for role, image in images.items():
        run = json.loads((out / role / "run.json").read_text())
        assert run["environment"]["image"]["digest"] in _image_ids(image)
        assert run["environment"]["interpreter"].startswith("/opt/venv/")  # the image's python
        for entry in run["cells"]:
            record = read_result(out / role / entry["file"])
            log = (out / role / "logs" / f"{Path(entry['file']).stem}.log").read_text()
            assert record["status"] == "ok", (record["failure"], log[-2000:])
            assert "NumPy" not in log and "numpy" not in log, log[-2000:]
            if record["spec"]["workload"] == "team_bench":
                assert record["source"] == {
                    **record["source"],
                    "file": str(plugin),
                    "sha256": digest,
                }
    matrix_cells = [c for c in decision["cells"] if c["row_id"] != "rollback@any"]
    assert matrix_cells and all(
        c["baseline_status"] == c["candidate_status"] == "ok" for c in matrix_cells
    )
    for cell in matrix_cells:
        status = next(g for g in cell["gates"] if g["gate"] == "status")
        assert status["verdict"] == "pass", cell
    if not rollback_checks:
        return
    rollback = {
        c["cell_id"]: c["gates"][0]["verdict"]
        for c in decision["cells"]
        if c["row_id"] == "rollback@any"
    }
    names = {n.removeprefix("rollback.").removesuffix("@any") for n in rollback}
    expected = {f"checkpoint.{fmt}.{way}" for fmt in ("torch_save", "dcp") for way in WAYS}
    assert {*expected, "rehearsal"} <= names, rollback
    assert set(rollback.values()) == {"pass"}, rollback
    for log in (out / "rollback" / "logs").iterdir():
        assert "NumPy" not in log.read_text(), log


def test_image_aa_with_an_outside_plugin_adopts(tmp_path: Path) -> None:
    plugin = _team_plugin(tmp_path)
    out = tmp_path / "runs" / "aa"
    code, decision = _image_ab(out, IMAGE, IMAGE, plugin, "mlp_train")
    _check_evidence(out, decision, plugin, {"baseline": IMAGE, "candidate": IMAGE})
    assert decision["comparable"]["ok"], decision["comparable"]
    adopts_where_decided(code, decision)


def test_image_aa_of_the_compile_and_export_cells_adopts(tmp_path: Path) -> None:
    """torch.compile (cold and warm, breaks, recompiles) and export (torch.export, ONNX in
    onnxruntime, AOTInductor) inside the image: the toolchain, Python's headers and the export
    extra are there, so every cell runs and its status gate passes."""
    plugin = _team_plugin(tmp_path)
    out = tmp_path / "runs" / "compile-export"
    # The rollback checks run every cell once more; the other A/As hold them, this one need not.
    policy = yaml.safe_load((REPO / "suite" / "data" / "default-policy.yaml").read_text())
    policy["rules"] = [r for r in policy["rules"] if r.get("gate") != "rollback"]
    for profile in policy["profiles"].values():
        profile["gates"].pop("rollback")
    (tmp_path / "policy.yaml").write_text(yaml.safe_dump(policy))
    # torch.compile's cold and warm compile, graph breaks and recompiles on the default dynamic
    # setting (mark_dynamic and static differ only in what torch is asked), and every export path.
    cells = (
        "compile.block.default.default.d64@cpu",
        "export.torch_export.block.d64@cpu",
        "export.onnx.block.d64@cpu",
        "export.aoti.block.d64@cpu",
    )
    code, decision = _image_ab(
        out, IMAGE, IMAGE, plugin, "compile", "export", rounds=1,
        policy=tmp_path / "policy.yaml", cells=cells,
    )  # fmt: skip
    _check_evidence(
        out, decision, plugin, {"baseline": IMAGE, "candidate": IMAGE}, rollback_checks=False
    )
    ran = {c["cell_id"] for c in decision["cells"] if c["row_id"] != "rollback@any"}
    assert ran == set(cells), ran
    onnx = [c for c in decision["cells"] if c["cell_id"].startswith("export.onnx.")]
    assert onnx and all(c["candidate_status"] == "ok" for c in onnx)
    adopts_where_decided(code, decision)


@pytest.mark.skipif(
    not CANDIDATE,
    reason="TORCH_MATRIX_TEST_IMAGE_CANDIDATE is unset (.ci/docker-setup.sh builds 2.13.0 and 2.14.1)",
)
def test_image_pin_pair_decides_with_every_status_and_rollback_gate_passing(
    tmp_path: Path,
) -> None:
    plugin = _team_plugin(tmp_path)
    out = tmp_path / "runs" / "pair"
    code, decision = _image_ab(out, IMAGE, CANDIDATE, plugin, "mlp_train")
    _check_evidence(out, decision, plugin, {"baseline": IMAGE, "candidate": CANDIDATE})
    versions = {
        role: json.loads((out / role / "run.json").read_text())["environment"]["torch"]["version"]
        for role in ("baseline", "candidate")
    }
    assert versions["baseline"] != versions["candidate"], versions
    # research profile: nothing failed, so no rule blocks a row; timing undecided everywhere
    # (two rounds) is missing evidence, which defers, and says so.
    adopts_where_decided(code, decision)


@pytest.mark.skipif(not CANDIDATE, reason="TORCH_MATRIX_TEST_IMAGE_CANDIDATE is unset")
def test_the_comments_reproduce_line_rewrites_a_failing_image_cell(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    plugin = _team_plugin(tmp_path)
    out = tmp_path / "runs" / "planted"
    torch_version = (
        subprocess.run(
            ["docker", "image", "inspect", "--format",
             '{{index .Config.Labels "dev.torch-matrix.torch-version"}}', CANDIDATE],
            capture_output=True, text=True, check=True,
        ).stdout.strip()
    )  # fmt: skip
    monkeypatch.setenv(FAIL_VAR, torch_version)  # the candidate's torch only
    code, decision = _image_ab(out, IMAGE, CANDIDATE, plugin, rounds=1)
    monkeypatch.delenv(FAIL_VAR)  # the line must carry it itself
    assert (code, decision["decision"]) == (6, "rollback"), decision["reasons"]
    (cell,) = [c for c in decision["cells"] if c["candidate_status"] == "failed"]
    original = read_result(out / "candidate" / "cells" / f"{cell['cell_id']}.json")
    assert "planted failure" in original["failure"]["message"]
    comment = (out / "decision.md").read_text()
    line = cell["repro"]["docker"]
    assert line in comment  # the comment shows the same line, in its own code block
    # No path of the machine that ran it, but under the artifact's own copy of the inputs.
    assert str(tmp_path) not in line.replace(f'"$PWD"/candidate/inputs{tmp_path}', "")
    # Pasted into bash in a copy of the results folder, as a downloaded artifact is.
    artifact = tmp_path / "downloaded" / "torch-matrix-job-cpu-1"
    shutil.copytree(out, artifact)
    shutil.rmtree(plugin.parent)  # the line needs nothing outside the artifact
    pasted = subprocess.run(
        ["bash", "-c", line], cwd=artifact, capture_output=True, text=True, timeout=900
    )
    assert pasted.returncode == 1, pasted.stderr  # `run` exits 1: the cell failed again
    (new,) = (artifact / "candidate" / "repro" / cell["cell_id"]).glob("*/cells/*.json")
    again = read_result(new)
    assert again["status"] == "failed"
    assert again["failure"]["mode"] == original["failure"]["mode"]
    assert again["failure"]["message"] == original["failure"]["message"]
    assert again["source"]["sha256"] == original["source"]["sha256"]
    # `repro` prints the same command with its own --out, and --run reruns it, from the copy of
    # the plugin that the run kept.
    printed = CliRunner().invoke(repro, [cell["cell_id"], "--results", str(out)])
    assert printed.exit_code == 0, printed.output
    kept = out / "candidate" / "inputs" / plugin.parent.relative_to("/")
    assert f"-v {kept}:{kept}:ro" in printed.stdout
    ran = CliRunner().invoke(repro, [cell["cell_id"], "--results", str(out), "--run"])
    assert ran.exit_code == 1, ran.output
    assert "status failed, was failed" in ran.stdout


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
    mkdir, docker_run = line.split(" && ", 1)
    assert mkdir == f"mkdir -p {run_dir / 'repro' / CELL}"  # else Docker makes it, owned by root
    assert docker_run.startswith("docker run --rm") and "--network none" in line
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


def test_an_image_that_holds_another_suite_is_refused(tmp_path: Path) -> None:
    other = "torch-matrix/test:another-suite"
    container = subprocess.run(
        ["docker", "create", IMAGE], capture_output=True, text=True, check=True
    ).stdout.strip()
    try:
        subprocess.run(
            ["docker", "commit", "--change", f"LABEL dev.torch-matrix.suite=sha256:{'0' * 64}",
             container, other],
            capture_output=True, check=True,
        )  # fmt: skip
        code, _, stderr = cli(
            "ab", "--baseline", f"docker:{other}", "--candidate", f"docker:{IMAGE}",
            "--workload", "sdpa", "--cell", CELL, "--out", str(tmp_path / "ab"),
        )  # fmt: skip
    finally:
        subprocess.run(["docker", "rm", "-f", container], capture_output=True, check=False)
        subprocess.run(["docker", "rmi", "-f", other], capture_output=True, check=False)
    assert code == 3, stderr
    assert f"holds suite sha256:{'0' * 12}" in stderr and "torch-matrix image build" in stderr
    assert not (tmp_path / "ab" / "baseline" / "run.json").exists()  # refused before any cell


def test_a_pin_that_is_an_image_gets_the_suite_on_that_base(tmp_path: Path) -> None:
    """A team's image that already holds torch (as a Dockerfile pin FROM pytorch/pytorch:… names
    one) is the side: the suite goes on top, torch stays the base's, the base is recorded by its
    digest."""
    base, wheels = (
        os.environ.get("TORCH_MATRIX_TEST_BASE"),
        os.environ.get("TORCH_MATRIX_TEST_WHEELS"),
    )
    if not base or not wheels:
        pytest.skip("TORCH_MATRIX_TEST_BASE / _WHEELS unset (.ci/docker-setup.sh makes them)")
    folder = Path(wheels) / "torch-2.13.0"
    context = tmp_path / "team-image"
    context.mkdir()
    for wheel in folder.glob("*.whl"):
        os.link(wheel, context / wheel.name)
    # The base pinned as NAME@sha256:ID; the classic builder finds a local image by its id.
    (context / "Dockerfile").write_text(
        f"FROM {_local_id(base)}\nCOPY *.whl /wheels/\n"
        "RUN pip install --break-system-packages --no-index --find-links /wheels "
        "torch==2.13.0 'numpy>=1.26,<3' && rm -rf /wheels\n"
    )
    team = "torch-matrix/test:team-torch-2.13.0"
    built = subprocess.run(
        ["docker", "build", "--network", "none", "-q", "-t", team, str(context)],
        capture_output=True, text=True, env={**os.environ, "DOCKER_BUILDKIT": "0"},
    )  # fmt: skip
    assert built.returncode == 0, built.stderr
    team_id = json.loads(
        subprocess.run(["docker", "image", "inspect", team], capture_output=True, check=True).stdout
    )[0]["Id"]
    try:
        _suite_on_the_team_image(tmp_path, team, team_id, folder)
    finally:
        for tag in (team, *_built_tags(tmp_path)):
            subprocess.run(["docker", "rmi", "-f", tag], capture_output=True, check=False)


def _local_id(base: str) -> str:
    """The image id a base reference pins (NAME@sha256:ID), else the one its tag points at."""
    name, _, digest = base.partition("@")
    if digest:
        return digest
    inspect = ["docker", "image", "inspect", "--format", "{{.Id}}", name]
    return subprocess.run(inspect, capture_output=True, text=True, check=True).stdout.strip()


def _built_tags(tmp_path: Path) -> list[str]:
    record = tmp_path / "image.json"
    return [json.loads(record.read_text())["tag"]] if record.is_file() else []


def _suite_on_the_team_image(tmp_path: Path, team: str, team_id: str, folder: Path) -> None:
    record = tmp_path / "image.json"
    code, stdout, stderr = cli(
        "image", "build", "--backend", "cpu", "--torch", "2.13.0", "--base", f"{team}@{team_id}",
        "--torch-from-base", "--wheel-dir", str(folder), "--no-pull", "--no-smoke",
        "--context", str(REPO), "--record", str(record), "--log", str(tmp_path / "build.log"),
    )  # fmt: skip
    assert code == 0, stderr + (tmp_path / "build.log").read_text()
    doc = json.loads(record.read_text())
    assert doc["recipe"]["from_base"] is True and doc["base"]["digest"] == team_id
    probe = subprocess.run(
        ["docker", "run", "--rm", "--network", "none", "--entrypoint", "python", doc["tag"], "-c",
         "import torch, suite; print(torch.__version__, torch.__file__)"],
        capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    assert probe[0].startswith("2.13.0")
    assert not probe[1].startswith("/opt/venv/")  # the base's torch, not a second copy
    side = prepare(stdout.strip(), "candidate")  # a side that runs it, by digest
    assert side.image is not None and side.image["id"] == doc["id"]
