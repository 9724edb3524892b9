"""A side's extra requirements (--with, --requirements): part of a venv side's cache key and its
one pip call, never with a credential; checked in an interpreter side before any cell runs,
naming what is missing; refused for an image side; read from a requirements file that lists
packages and nothing else."""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from suite.cli.main import main
from suite.core.errors import EnvironmentProblem, InputError
from suite.execute import sides
from suite.execute.indexes import Indexes
from suite.execute.side_deps import read_requirements, resumed
from suite.execute.sides import prepare, venv_path

TOKEN = "s3cr3t-Req-Token-77"
PRIVATE = f"teamlib @ https://ci:{TOKEN}@pkgs.example.com/teamlib-1.0-py3-none-any.whl"


def _path(*extra: str) -> Path:
    return venv_path("torch==2.13.0", sys.executable, Indexes(), extra)


def test_extra_requirements_key_the_venv_as_a_set_without_credentials() -> None:
    plain = _path()
    one = _path("transformers==4.57.1", "tabulate")
    assert one != plain and one != _path("transformers==4.57.2", "tabulate")
    assert one == _path("tabulate", "transformers==4.57.1")  # another order, the same venv
    private = _path(PRIVATE)
    assert private == _path(PRIVATE.replace(TOKEN, "another-token"))  # a token is not a package
    assert private != plain and TOKEN not in str(private)


def test_a_requirements_file_lists_packages_and_skips_blanks_and_comments(tmp_path: Path) -> None:
    file = tmp_path / "requirements.txt"
    file.write_text("# what the team's models need\n\ntransformers==4.57.1  # pinned\ntabulate\n")
    assert read_requirements(file) == ("transformers==4.57.1", "tabulate")


@pytest.mark.parametrize(
    ("line", "says"),
    [
        ("torch==2.14.1", "names torch itself"),
        ("Torch>=2", "names torch itself"),
        ("-r more.txt", "is a pip option"),
        ("--index-url https://pkgs.example.com/simple", "is a pip option"),
        ("./wheels/teamlib.whl", "is not a requirement"),
    ],
)
def test_a_requirements_file_line_that_is_not_a_package_is_refused_by_file_and_line(
    tmp_path: Path, line: str, says: str
) -> None:
    file = tmp_path / "requirements.txt"
    file.write_text(f"numpy\n{line}\n")
    with pytest.raises(InputError, match=says) as caught:
        read_requirements(file)
    assert caught.value.file == f"{file}:2" and caught.value.option == "--requirements"


def test_a_missing_requirements_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no such requirements file") as caught:
        read_requirements(tmp_path / "absent.txt")
    assert caught.value.file == str(tmp_path / "absent.txt")


@pytest.mark.parametrize("command", ["ab", "calibrate"])
def test_the_commands_refuse_a_torch_line_and_a_torch_with_before_anything_runs(
    tmp_path: Path, command: str
) -> None:
    file = tmp_path / "requirements.txt"
    file.write_text("tabulate\ntorch==2.14.1\n")
    base = ["ab", "--candidate", "current"] if command == "ab" else ["calibrate"]
    base += ["--workload", "sdpa", "--out", str(tmp_path / "out")]
    runner = CliRunner()
    from_file = runner.invoke(main, [*base, "--requirements", str(file)], catch_exceptions=False)
    assert from_file.exit_code == 2, from_file.output
    assert f"--requirements {file}:2: 'torch==2.14.1' names torch itself" in from_file.stderr
    given = runner.invoke(main, [*base, "--with", "torch>=2"], catch_exceptions=False)
    assert given.exit_code == 2, given.output
    assert "--with: 'torch>=2' names torch itself" in given.stderr
    absent = tmp_path / "absent.txt"
    missing = runner.invoke(main, [*base, "--requirements", str(absent)], catch_exceptions=False)
    assert missing.exit_code == 2 and f"{absent}: no such requirements file" in missing.stderr
    assert not (tmp_path / "out").exists()


def test_an_interpreter_without_the_suites_needs_is_refused_naming_them(tmp_path: Path) -> None:
    venv = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = str(venv / "bin" / "python")
    with pytest.raises(EnvironmentProblem) as caught:
        prepare(python, "baseline")
    message = str(caught.value)
    assert message.startswith(f"--baseline: the interpreter {python} ")
    assert "cannot import torch" in message and "cannot import jsonschema" in message
    assert "cannot import numpy" in message and "cannot import yaml" in message
    assert f"{python} -m pip install torch 'jsonschema>=4.18'" in message
    assert "--with" in message  # the other way: a torch==X side that installs them


def test_an_interpreter_is_checked_for_each_extra_requirement_and_its_version() -> None:
    with pytest.raises(EnvironmentProblem, match="zzz-no-such-dist is not installed") as caught:
        prepare(sys.executable, "candidate", with_requirements=("zzz-no-such-dist>=1",))
    assert str(caught.value).startswith("--candidate: ")
    side = prepare(sys.executable, "candidate", with_requirements=("numpy>=1",))
    assert side.with_requirements == ("numpy>=1",) and side.kind == "python"
    found = version("numpy")
    with pytest.raises(EnvironmentProblem, match=f"numpy {found} is installed, but numpy<1"):
        prepare(sys.executable, "candidate", with_requirements=("numpy<1",))
    # A marker is read in the side's interpreter: one that does not apply there asks nothing.
    elsewhere = 'zzz-no-such-dist; sys_platform == "nonesuch"'
    assert prepare("current", "baseline", with_requirements=(elsewhere,)).kind == "current"


def test_an_image_side_takes_no_extra_requirements_and_docker_is_not_asked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import suite.execute.docker as docker

    def contacted(*_: Any, **__: Any) -> Any:
        raise AssertionError("Docker was contacted")

    monkeypatch.setattr(docker, "prepare_docker", contacted)
    with pytest.raises(InputError, match="torch-matrix image build --with REQ") as caught:
        prepare("docker:team/models:2.14.1", "candidate", with_requirements=("tabulate",))
    assert caught.value.option == "--with"
    # In ab the refusal comes before either side is prepared: no venv is built in vain.
    monkeypatch.setattr(sides, "venv_for", contacted)
    result = CliRunner().invoke(
        main,
        ["ab", "--baseline", "torch==2.13.0", "--candidate", "docker:team/models:2.14.1",
         "--with", "tabulate", "--workload", "sdpa", "--out", str(tmp_path / "out")],
        catch_exceptions=False,
    )  # fmt: skip
    assert result.exit_code == 2, result.output
    assert "--with: an image side (docker:team/models:2.14.1)" in result.stderr


def test_a_venv_installs_the_extra_requirements_with_torch_and_keeps_no_credential(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TORCH_MATRIX_CACHE", str(tmp_path / "cache"))
    calls: list[list[str]] = []

    def fake_run(argv: list[str], **_: Any) -> subprocess.CompletedProcess[str]:
        calls.append(argv)
        if argv[1:4] == ["-I", "-m", "venv"]:
            (Path(argv[-1]) / "bin").mkdir(parents=True, exist_ok=True)
            (Path(argv[-1]) / "bin" / "python").write_text("")
        return subprocess.CompletedProcess(argv, 0, "", "")

    monkeypatch.setattr(sides.subprocess, "run", fake_run)
    log = tmp_path / "prepare.log"
    side = prepare("torch==2.13.0", "candidate", log=log, with_requirements=("tabulate", PRIVATE))
    (pip,) = [argv for argv in calls if "install" in argv]
    assert pip[pip.index("-q") + 1 :] == [
        "torch==2.13.0", *sides.WORKER_REQUIREMENTS, "tabulate", PRIVATE,
    ]  # fmt: skip
    assert side.with_requirements == ("tabulate", PRIVATE)
    ready = (Path(side.interpreter).parent.parent / sides.READY).read_text()
    assert "tabulate" in ready and "https://***@pkgs.example.com" in ready
    for path in [log, *(tmp_path / "cache").rglob("*")]:
        assert TOKEN not in str(path)
        assert not path.is_file() or TOKEN.encode() not in path.read_bytes(), path


def test_a_resumed_ab_keeps_its_extra_requirements() -> None:
    assert resumed(["tabulate"], []) == ("tabulate",)
    assert resumed(["tabulate", "numpy"], ["numpy", "tabulate"]) == ("numpy", "tabulate")
    with pytest.raises(InputError, match="ran with --with tabulate") as caught:
        resumed(["tabulate"], ["transformers"])
    assert caught.value.option == "--with"
    masked = PRIVATE.replace(f"ci:{TOKEN}", "***")
    with pytest.raises(InputError, match="give --with again"):
        resumed([masked], [])
    assert resumed([masked], [PRIVATE]) == (PRIVATE,)  # given again, with its credential


def test_a_sides_run_record_names_its_extra_requirements_masked() -> None:
    from suite.execute.prepared import PreparedSide
    from suite.flows.ab import _side_extra, design_for
    from suite.judge.policy import load_policy

    policy = load_policy(None, None)
    design = design_for(policy, None)
    side = PreparedSide("torch==2.13.0", "torch==2.13.0", "/venv/bin/python", 0.0, "requirement",
                        with_requirements=("tabulate", PRIVATE))  # fmt: skip
    ab = _side_extra("candidate", side, policy, {}, design)["ab"]
    assert ab["with_requirements"] == ["tabulate", PRIVATE.replace(f"ci:{TOKEN}", "***")]
    plain = PreparedSide("current", "current", sys.executable, 0.0, "current")
    assert "with_requirements" not in _side_extra("baseline", plain, policy, {}, design)["ab"]


def _matrix_with(tmp_path: Path, *requirements: str) -> Path:
    matrix = tmp_path / "models.yaml"
    listed = ", ".join(f'"{r}"' for r in requirements)
    matrix.write_text(
        f"version: 1\nname: models\nbackends: [cpu]\nrequirements: [{listed}]\n"
        "workloads:\n  - workload: sdpa\n"
    )
    return matrix


def test_the_matrixs_requirements_are_checked_by_file_and_entry_before_anything_runs(
    tmp_path: Path,
) -> None:
    runner = CliRunner()
    bad = _matrix_with(tmp_path, "numpy", "torch==2.14.1")
    out = tmp_path / "out"
    result = runner.invoke(
        main, ["ab", "--candidate", "current", "--matrix", str(bad), "--out", str(out)],
        catch_exceptions=False,
    )  # fmt: skip
    assert result.exit_code == 2, result.output
    assert f"{bad}::requirements[1]: 'torch==2.14.1' names torch itself" in result.stderr
    # A side that lacks what the matrix needs is refused up front, naming the package.
    lacking = _matrix_with(tmp_path, "zzz-no-such-dist>=1")
    result = runner.invoke(
        main, ["ab", "--candidate", "current", "--matrix", str(lacking), "--out", str(out)],
        catch_exceptions=False,
    )  # fmt: skip
    assert result.exit_code != 0 and "zzz-no-such-dist is not installed" in result.stderr
    assert not out.exists()


def test_the_matrixs_requirements_go_to_every_side_that_takes_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from suite.cli.ab import _prepare
    from suite.execute.indexes import Indexes

    given: dict[str, tuple[str, ...]] = {}

    def prepared(spec: str, role: str, **kw: Any) -> Any:
        from suite.execute.prepared import PreparedSide

        given[role] = tuple(kw["with_requirements"])
        return PreparedSide(spec, role, sys.executable, 0.0, sides.parse(spec, role))

    monkeypatch.setattr(sides, "prepare", prepared)
    none = {"baseline": Indexes(), "candidate": Indexes()}
    _prepare("torch==2.13.0", "docker:team/models:2.14.1", tmp_path, none, (), ("transformers",))
    # An image holds what it was built with (image build --matrix adds them); a venv installs them.
    assert given == {"baseline": ("transformers",), "candidate": ()}
    _prepare("current", "torch==2.14.1", tmp_path, none, ("numpy",), ("transformers", "numpy"))
    assert given == {"baseline": ("numpy", "transformers"), "candidate": ("numpy", "transformers")}


def test_a_resumed_ab_does_not_count_the_matrixs_requirements_as_with(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import suite.flows.ab as ab
    from suite.flows.ab import recorded_requirements

    run = {"ab": {"with_requirements": ["numpy", "transformers"]}}
    monkeypatch.setattr(ab, "read_run", lambda path: run)
    assert recorded_requirements(tmp_path, ["numpy"], ["transformers"]) == ("numpy",)
    assert recorded_requirements(tmp_path, [], ["transformers"]) == ("numpy",)
