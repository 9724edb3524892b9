"""Each environment of a repository with its own torch: a change is told environment by
environment, so that the move of one file is never hidden behind another file's pin, and a
backend's job takes the move of the environment it runs in (the matrix's pin-source)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from suite.cli.ci import pins_command, plan_command
from suite.pins.assess import detect_bump

INTEL = """\
ARG PLATFORM=xpu
FROM debian:12 AS xpu
RUN pip install torch=={xpu} --index-url https://download.pytorch.org/whl/xpu
FROM debian:12 AS cpu
RUN pip install torch=={cpu} --index-url https://download.pytorch.org/whl/cpu
"""


def test_each_build_stage_of_a_dockerfile_is_an_environment() -> None:
    """One Dockerfile builds an XPU and a CPU image on different torches: moving the XPU stage
    is that stage's from -> to (it was unknown, the file's two pins said to disagree)."""
    base = {"Dockerfile_intel": INTEL.format(xpu="2.7.0", cpu="2.7.0")}
    head = {"Dockerfile_intel": INTEL.format(xpu="2.8.0", cpu="2.7.0")}
    result = detect_bump(base, head)
    assert result is not None and result.status == "changed", result
    assert (result.baseline, result.candidate) == ("torch==2.7.0", "torch==2.8.0")
    assert {env: (b, c) for env, b, c in result.environments} == {
        "Dockerfile_intel#xpu": ("torch==2.7.0", "torch==2.8.0"),
        "Dockerfile_intel#cpu": ("torch==2.7.0", "torch==2.7.0"),
    }
    # Both stages moved, differently: which one a backend's job uses is not in the file.
    both = detect_bump(base, {"Dockerfile_intel": INTEL.format(xpu="2.8.0", cpu="2.9.0")})
    assert both is not None and both.status == "unknown", both
    assert "Dockerfile_intel#xpu: torch==2.7.0" in both.message
    assert "Dockerfile_intel#cpu: torch==2.7.0" in both.message


def test_unnamed_stages_are_numbered_and_one_stage_is_the_file() -> None:
    text = "FROM pytorch/pytorch:{a}-cuda12.4-cudnn9-runtime\nFROM debian:12\nRUN pip install torch=={b}\n"
    result = detect_bump({"Dockerfile": text.format(a="2.5.1", b="2.5.1")},
                         {"Dockerfile": text.format(a="2.6.0", b="2.5.1")})  # fmt: skip
    assert result is not None and result.status == "changed", result
    assert [env for env, _, _ in result.environments] == [
        "Dockerfile#stage 1",
        "Dockerfile#stage 2",
    ]
    single = detect_bump({"Dockerfile": "FROM debian:12 AS run\nRUN pip install torch==2.5.1\n"},
                         {"Dockerfile": "FROM debian:12 AS run\nRUN pip install torch==2.6.0\n"})  # fmt: skip
    assert single is not None and [e for e, _, _ in single.environments] == ["Dockerfile"]


def test_a_file_whose_own_pin_moved_is_never_hidden_behind_another_files_pin() -> None:
    """A requirements file drops torch==1.2 while a Dockerfile still installs 1.2.0: the
    requirements' environment moved (it was answered unchanged, the repository collapsed to the
    first exact pin in path order, the Dockerfile's)."""
    base = {
        "Dockerfile": "FROM debian:12\nRUN pip install torch==1.2.0\n",
        "requirements.txt": "numpy\ntorch==1.2\n",
    }
    head = {**base, "requirements.txt": "numpy\n"}
    result = detect_bump(base, head)
    assert result is not None and result.status == "changed", result
    assert (result.baseline, result.candidate) == ("torch==1.2", None)
    assert result.files == ("requirements.txt",)


def test_in_a_multi_environment_repository_the_moved_environment_is_the_answer() -> None:
    """A Gaudi backend and an Ascend image pin their vendors' torches; the repository's first
    path (backends/gaudi) is not the move when only the Ascend image moved."""
    base = {
        "backends/gaudi/requirements.txt": "torch==2.4.0\n",
        "docker/ascend/Dockerfile": "FROM debian:12\nRUN pip install torch==2.1.0\n",
        "requirements.txt": "torch==2.6.0\n",
    }
    head = {**base, "docker/ascend/Dockerfile": "FROM debian:12\nRUN pip install torch==2.5.1\n"}
    result = detect_bump(base, head)
    assert result is not None and result.status == "changed", result
    assert (result.baseline, result.candidate) == ("torch==2.1.0", "torch==2.5.1")
    assert result.files == ("docker/ascend/Dockerfile",)


CUDA = "FROM debian:12\nRUN pip install torch=={v} --index-url https://download.pytorch.org/whl/cu128\n"
ROCM = "FROM debian:12\nRUN pip install torch=={v} --index-url https://download.pytorch.org/whl/rocm6.4\n"
MATRIX = """\
version: 1
name: fleet
backends: [cpu, cuda, rocm]
runners: {{cuda: [self-hosted, h100], rocm: [self-hosted, mi300]}}
{sources}workloads:
  - workload: sdpa
"""


def _record(tmp_path: Path, cuda: tuple[str, str], rocm: tuple[str, str]) -> Path:
    """`pins --json` on a real two-commit repository with a CUDA and a ROCm Dockerfile."""
    root = tmp_path / "repo"
    root.mkdir()
    git = ["git", "-C", str(root), "-c", "user.email=t@e", "-c", "user.name=t"]
    subprocess.run([*git, "init", "-q"], check=True)
    for side in (0, 1):
        (root / "docker").mkdir(exist_ok=True)
        (root / "docker/Dockerfile.cuda").write_text(CUDA.format(v=cuda[side]))
        (root / "docker/Dockerfile.rocm").write_text(ROCM.format(v=rocm[side]))
        (root / "requirements.txt").write_text("torch==2.6.0\n")
        subprocess.run([*git, "add", "-A"], check=True)
        subprocess.run([*git, "commit", "-qm", str(side)], check=True)
    argv = ["--repo", str(root), "--base", "HEAD~1", "--head", "HEAD", "--json"]
    result = CliRunner().invoke(pins_command, argv, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    record = tmp_path / "pins.json"
    record.write_text(result.stdout)
    return record


def _plan(tmp_path: Path, record: Path, sources: str, monkeypatch: pytest.MonkeyPatch) -> Any:
    matrix = tmp_path / "matrix.yml"
    matrix.write_text(MATRIX.format(sources=sources))
    out = tmp_path / "github_output"
    out.write_text("")
    monkeypatch.setenv("GITHUB_OUTPUT", str(out))
    argv = ["--matrix", str(matrix), "--pin-environments", str(record)]
    result = CliRunner().invoke(plan_command, argv)
    if result.exit_code != 0:
        assert out.read_text() == ""  # nothing half-written
        return result, []
    return result, _output(out.read_text(), "pin_notes").splitlines()


def _output(text: str, name: str) -> str:
    """One output of a GITHUB_OUTPUT file: name=value, or name<<DELIMITER ... DELIMITER."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.startswith(f"{name}="):
            return line.split("=", 1)[1]
        if line.startswith(f"{name}<<"):
            end = lines.index(line.split("<<", 1)[1], i + 1)
            return "\n".join(lines[i + 1 : end])
    raise AssertionError(f"no output {name} in {text!r}")


def test_each_backend_takes_its_pin_source_environments_move(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The CUDA and ROCm images moved differently: `pins` cannot say which is the move (unknown),
    and the matrix's pin-source gives each backend's jobs their own image's sides, index and
    all; the CPU backend, whose requirements did not move, is not planned."""
    record = _record(tmp_path, ("2.7.0", "2.8.0"), ("2.6.0", "2.7.1"))
    assert json.loads(record.read_text())["status"] == "unknown"
    sources = "pin-source: {cuda: docker/Dockerfile.cuda, rocm: docker/Dockerfile.rocm, cpu: .}\n"
    result, notes = _plan(tmp_path, record, sources, monkeypatch)
    assert result.exit_code == 0, result.output
    jobs = {j["backend"]: j for j in json.loads(result.stdout)["include"]}
    assert set(jobs) == {"cuda", "rocm"}
    assert jobs["cuda"]["pins"]["baseline"] == "torch==2.7.0"
    assert jobs["cuda"]["pins"]["candidate"] == "torch==2.8.0"
    assert jobs["cuda"]["pins"]["candidate-index-url"] == "https://download.pytorch.org/whl/cu128"
    assert jobs["rocm"]["pins"]["candidate"] == "torch==2.7.1"
    assert jobs["rocm"]["pins"]["pin-source"] == "docker/Dockerfile.rocm"
    assert notes[0].startswith("cpu (4 cells) not planned: its pin-source did not move (.: ")
    assert "rocm ran its pin-source, docker/Dockerfile.rocm: torch==2.6.0 -> torch==2.7.1" in notes


def test_a_backend_without_a_pin_source_is_named_and_a_wrong_one_is_an_input_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    record = _record(tmp_path, ("2.7.0", "2.8.0"), ("2.6.0", "2.7.1"))
    result, notes = _plan(
        tmp_path, record, "pin-source: {cuda: docker/Dockerfile.cuda}\n", monkeypatch
    )
    assert result.exit_code == 0, result.output
    jobs = {j["backend"]: j for j in json.loads(result.stdout)["include"]}
    assert "pins" not in jobs["rocm"] and "pins" not in jobs["cpu"]
    assert "the matrix names no pin-source for cpu, rocm: they ran on" in notes[0]
    assert "docker/Dockerfile.rocm: torch==2.6.0 -> torch==2.7.1" in notes[0]
    result, _ = _plan(tmp_path, record, "pin-source: {cuda: docker/Dockerfile}\n", monkeypatch)
    assert result.exit_code == 2
    assert "$.pin-source.cuda" in result.output and "docker/Dockerfile.cuda" in result.output
    # Only unmoved environments named: nothing of this matrix tests the move.
    result, _ = _plan(tmp_path, record, "pin-source: {cpu: ., cuda: ., rocm: .}\n", monkeypatch)
    assert result.exit_code == 2 and "nothing to plan" in result.output


def test_without_pin_environments_the_plan_is_as_before(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    matrix = tmp_path / "matrix.yml"
    matrix.write_text(MATRIX.format(sources="pin-source: {cuda: nowhere}\n"))
    result = CliRunner().invoke(plan_command, ["--matrix", str(matrix)])
    assert result.exit_code == 0, result.output
    assert all("pins" not in j for j in json.loads(result.stdout)["include"])


def test_ranges_that_make_room_for_the_exact_move_are_that_move() -> None:
    """One folder pins torch==2.8.0 for type checks, two others a range; the change moves the pin
    to 2.9.0 and widens the ranges to admit it: one move, 2.8.0 -> 2.9.0. A range that moves
    without admitting the new pin is a move of its own: unknown."""
    base = {
        "requirements/typing.txt": "torch==2.8.0\n",
        "requirements/fabric/base.txt": "torch>=2.1.0,<2.9.0\n",
        "requirements/pytorch/base.txt": "torch>=2.1.0,<2.9.0\n",
    }
    head = {
        "requirements/typing.txt": "torch==2.9.0\n",
        "requirements/fabric/base.txt": "torch>=2.1.0,<2.10.0\n",
        "requirements/pytorch/base.txt": "torch>=2.1.0,<2.10.0\n",
    }
    result = detect_bump(base, head)
    assert result is not None and result.status == "changed", result
    assert (result.baseline, result.candidate) == ("torch==2.8.0", "torch==2.9.0")
    apart = detect_bump(base, {**head, "requirements/fabric/base.txt": "torch>=2.1.0,<2.8.5\n"})
    assert apart is not None and apart.status == "unknown", apart
    assert "environments moved differently" in apart.message
