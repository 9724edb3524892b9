"""The fail-closed scan behind the pin readers (suite/pins/scan.py): a changed line anywhere that
could move torch, and that no reader explains, makes `pins` answer unknown, never "no torch
change". One small file of each shape the readers missed in real repositories (written here,
from the shape alone), on real git commits, and a seeded property over random file names."""

from __future__ import annotations

import json
import random
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from suite.cli.ci import pins_command
from suite.pins.assess import detect_bump
from suite.pins.scan import Changed, could_move_torch, git_changes, text_changes


def _git(root: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-C", str(root), "-c", "user.email=t@e", "-c", "user.name=t", *args],
        check=True, capture_output=True,
    )  # fmt: skip


def _pins(tmp_path: Path, base: dict[str, str], head: dict[str, str]) -> dict[str, object]:
    root = tmp_path / "repo"
    root.mkdir(parents=True)
    _git(root, "init", "-q")
    for files, message in ((base, "base"), (head, "head")):
        for old in root.rglob("*"):
            if old.is_file() and ".git" not in old.parts:
                old.unlink()
        for name, text in files.items():
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            (root / name).write_text(text)
        _git(root, "add", "-A")
        _git(root, "commit", "-qm", message, "--allow-empty")
    argv = ["--base", "HEAD~1", "--head", "HEAD", "--repo", str(root), "--json"]
    result = CliRunner().invoke(pins_command, argv, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    record: dict[str, object] = json.loads(result.stdout)
    return record


def _files(record: dict[str, object]) -> set[str]:
    unknown = record.get("unknown") or []
    assert isinstance(unknown, list)
    return {u["file"] for u in unknown}


APP = "import torch\nprint(torch.__version__)\n"
# Each shape: (base files, head files, the file the answer must name). Every one of them was
# "no torch change" before the scan; no reader reads them, so the answer is unknown.
SHAPES = {
    "workflow matrix": (
        {".github/workflows/ci.yml": "jobs:\n  t:\n    strategy:\n      matrix:\n        torch-version: ['2.13.0']\n"},
        {".github/workflows/ci.yml": "jobs:\n  t:\n    strategy:\n      matrix:\n        torch-version: ['2.14.1']\n"},
        ".github/workflows/ci.yml",
    ),
    "an image with torch in its name, moved to latest": (
        {"compose.yaml": "services:\n  train:\n    image: mosaicml/pytorch:2.1.2_cu121-python3.10\n"},
        {"compose.yaml": "services:\n  train:\n    image: rocm/pytorch:latest\n"},
        "compose.yaml",
    ),
    "a shell script": (
        {"scripts/setup.sh": "#!/bin/sh\npython -m pip install 'torch==2.13.0' numpy\n"},
        {"scripts/setup.sh": "#!/bin/sh\npython -m pip install 'torch==2.14.1' numpy\n"},
        "scripts/setup.sh",
    ),
}  # fmt: skip


@pytest.mark.parametrize("shape", list(SHAPES))
def test_a_torch_move_no_reader_explains_is_unknown(tmp_path: Path, shape: str) -> None:
    base, head, named = SHAPES[shape]
    base = {**base, "app.py": APP}
    head = {**head, "app.py": APP}
    record = _pins(tmp_path, base, head)
    assert record["status"] == "unknown" and record["run"] is True, record
    assert named in _files(record), record
    assert "which could move torch and which no reader explains" in str(record["message"])


READ_EXACTLY = {
    "workflow run step": (
        {".github/workflows/ci.yml": "jobs:\n  t:\n    steps:\n      - run: pip install torch==2.13.0\n"},
        {".github/workflows/ci.yml": "jobs:\n  t:\n    steps:\n      - run: pip install torch==2.14.1\n"},
        ".github/workflows/ci.yml",
    ),
    "command word from variables": (
        {"docker/Dockerfile": "FROM debian:12\nARG PYTORCH_VERSION=2.13.0\nARG PV=3\n"
         "RUN pip${PV} install torch==${PYTORCH_VERSION}+cpu\n"},
        {"docker/Dockerfile": "FROM debian:12\nARG PYTORCH_VERSION=2.14.1\nARG PV=3\n"
         "RUN pip${PV} install torch==${PYTORCH_VERSION}+cpu\n"},
        "docker/Dockerfile",
    ),
    "BuildKit heredoc": (
        {"Dockerfile": "FROM debian:12\nRUN <<EOF\nuv pip install --system torch==2.13.0\nEOF\n"},
        {"Dockerfile": "FROM debian:12\nRUN <<EOF\nuv pip install --system torch==2.14.1\nEOF\n"},
        "Dockerfile",
    ),
}  # fmt: skip


@pytest.mark.parametrize("shape", list(READ_EXACTLY))
def test_a_shape_the_readers_missed_is_read_exactly(tmp_path: Path, shape: str) -> None:
    """A command word built from a variable (pip${PV}), a BuildKit heredoc, a workflow's run
    step: read, with the from -> to they install (before, "no torch change")."""
    base, head, _ = READ_EXACTLY[shape]
    record = _pins(tmp_path, base, head)
    assert record["status"] == "changed", record
    assert str(record["baseline"]).startswith("torch==2.13.0"), record
    assert str(record["candidate"]).startswith("torch==2.14.1"), record


SETUP = (
    "from setuptools import setup\nREQS = ['numpy', {}]\nsetup(name='x', install_requires=REQS)\n"
)


@pytest.mark.parametrize(
    ("old", "new", "status"),
    [
        ("'torch==2.13.0'", "'torch==2.14.1'", "changed"),
        ("'torch>=2.13,<2.14'", "'torch>=2.14,<2.15'", "unknown"),  # a range: which torch?
        ("f'torch=={V}'", "f'torch=={V}'", "unknown"),  # built at run time, moved by V
    ],
    ids=["exact", "range", "run-time"],
)
def test_setup_py_is_read_statically(tmp_path: Path, old: str, new: str, status: str) -> None:
    base = {"setup.py": SETUP.format(old).replace("REQS =", "V = '2.13.0'\nREQS =")}
    head = {"setup.py": SETUP.format(new).replace("REQS =", "V = '2.14.1'\nREQS =")}
    record = _pins(tmp_path, base, head)
    assert record["status"] == status, record
    if status == "changed":
        assert (record["baseline"], record["candidate"]) == ("torch==2.13.0", "torch==2.14.1")
    cfg = _pins(
        tmp_path / "cfg",
        {"setup.cfg": "[options]\ninstall_requires =\n    numpy\n    torch==2.13.0\n"},
        {"setup.cfg": "[options]\ninstall_requires =\n    numpy\n    torch==2.14.1\n"},
    )
    assert (cfg["status"], cfg["candidate"]) == ("changed", "torch==2.14.1")


def test_a_dockerfile_of_any_name_is_read(tmp_path: Path) -> None:
    """Dockerfile_intel, Dockerfile-amd, gpu.Dockerfile: read as Dockerfiles, an exact answer."""
    for name in ("Dockerfile_intel", "Containerfile-amd", "docker/gpu.Dockerfile"):
        folder = tmp_path / name.replace("/", "-")
        folder.mkdir()
        record = _pins(
            folder,
            {name: "FROM debian:12\nRUN pip install torch==2.13.0\n"},
            {name: "FROM debian:12\nRUN pip install torch==2.14.1\n"},
        )
        assert record["status"] == "changed", (name, record)
        assert (record["baseline"], record["candidate"]) == ("torch==2.13.0", "torch==2.14.1")


def test_what_no_reader_needs_to_explain_stays_no_change(tmp_path: Path) -> None:
    """A change that names torch only as code and prose: no torch change (no spurious unknown),
    and a reader-explained move stays exact."""
    record = _pins(
        tmp_path,
        {"app.py": APP, "README.md": "Needs torch>=2.13.\n", "requirements.txt": "torch==2.13.0\n"},
        {"app.py": APP + "x = torch.ones(2)\nif torch.__version__ >= '2.14': pass\n",
         "README.md": "Needs torch>=2.14.\n", "requirements.txt": "torch==2.13.0\n"},
    )  # fmt: skip
    assert record["status"] == "unchanged", record
    moved = _pins(
        tmp_path / "moved",
        {"Dockerfile": "FROM debian:12\nARG TORCH_VERSION=2.13.0\nRUN pip install torch==${TORCH_VERSION}\n"},
        {"Dockerfile": "FROM debian:12\nARG TORCH_VERSION=2.14.1\nRUN pip install torch==${TORCH_VERSION}\n"},
    )  # fmt: skip
    assert moved["status"] == "changed", moved


def test_git_and_texts_give_the_same_changed_lines(tmp_path: Path) -> None:
    """The diff reader of git commits and the one of texts in memory agree, a deleted file's
    lines included (under its old path)."""
    base = {"a.txt": "one\ntwo\nthree\n", "gone.sh": "pip install torch==2.13.0\n"}
    head = {"a.txt": "one\n2\nthree\nfour\n", "new.sh": "-- a line\n++ another\n"}
    root = tmp_path / "repo"
    root.mkdir()
    _git(root, "init", "-q")
    for files in (base, head):
        for old in root.glob("*.*"):
            if old.is_file():
                old.unlink()
        for name, text in files.items():
            (root / name).write_text(text)
        _git(root, "add", "-A")
        _git(root, "commit", "-qm", "x")
    from_git, problem = git_changes(root, "HEAD~1", "HEAD")
    assert problem is None
    from_texts = [
        c for name in sorted(base.keys() | head.keys())
        for c in text_changes(name, base.get(name), head.get(name))
    ]  # fmt: skip
    assert sorted(from_git, key=repr) == sorted(from_texts, key=repr)
    assert Changed("gone.sh", "base", 1, "pip install torch==2.13.0", gone=True) in from_git


def test_a_line_that_says_the_same_of_torch_or_a_deleted_file_moves_nothing(
    tmp_path: Path,
) -> None:
    """A mirror, a flag or an OS moved beside an unchanged torch is no torch change; a file the
    change deletes installs nothing any more; the same lines naming another torch (a CUDA
    variant included) stay unknown."""
    ci = "ci/pipeline.yml"  # a file no reader reads: the scan alone
    line = "      - run: pip install torch==2.13.0{} -f https://{}.example/whl\n"
    image = "    container: team/pytorch:2.13.0_cpu-python3.11-ubuntu{}\n"
    same = _pins(
        tmp_path / "same",
        {ci: line.format("", "us") + image.format("20.04"), "gone.sh": "pip install torch==2.1\n"},
        {ci: line.format("", "cn") + image.format("22.04")},
    )  # fmt: skip
    assert same["status"] == "unchanged", same
    for moved in (line.format("+cu128", "us") + image.format("20.04"),
                  line.format("", "us") + image.format("20.04").replace("2.13.0", "2.14.1"),
                  line.format("", "us") + image.format("20.04").replace("_cpu", "_cu128")):  # fmt: skip
        record = _pins(tmp_path / f"moved{len(moved)}", {ci: _same_base(line, image)}, {ci: moved})
        assert record["status"] == "unknown", record


def _same_base(line: str, image: str) -> str:
    return line.format("", "us") + image.format("20.04")


FORMS = (
    "torch=={v}", "torch>={v}", "'torch=={v}',", '"torch": "^{v}"', "torch = \"{v}\"",
    "pytorch={v}", "RUN pip install torch=={v}", "pip3 install -U torch=={v}+cu128",
    "FROM pytorch/pytorch:{v}-cuda12.4-cudnn9-runtime", "image: nvcr.io/nvidia/pytorch:{v}-py3",
    "TORCH_VERSION={v}", "ARG PYTORCH_VERSION={v}", "torch_version: '{v}'",
    "https://download.pytorch.org/whl/cu128/torch-{v}%2Bcu128-cp311-cp311-linux_x86_64.whl",
    "conda install -y pytorch=={v} -c pytorch", "uv pip install torch=={v}",
)  # fmt: skip
STEMS = ("Dockerfile", "setup", "build", "ci", "env", "deps", "install", "x", "requirements",
         "pyproject", "Makefile", "justfile", "tox", "noxfile", "run", "train")  # fmt: skip
SUFFIXES = ("", ".py", ".sh", ".yml", ".yaml", ".toml", ".cfg", ".txt", ".in", ".json", ".ini",
            ".mk", ".bash", ".ps1", "_intel", ".cuda")  # fmt: skip
FILLER = ("import os", "echo hello", "name: build", "[tool.x]", "# a comment", "", "x = 1")


def test_a_torch_version_put_into_any_file_is_never_no_change() -> None:
    """Seeded property: 400 random edits, each putting a torch version in one of the forms
    above (in Python source, as a string) into a file of a random name and type, with other
    files around it; `pins` never answers no torch change."""
    rng = random.Random(35)
    for case in range(400):
        name = rng.choice(["", "docker/", "ci/", ".github/workflows/"]) + rng.choice(STEMS)
        name += rng.choice(SUFFIXES)
        lines = [rng.choice(FILLER) for _ in range(rng.randint(0, 12))]
        base = {name: "\n".join(lines) + "\n", "app.py": APP}
        version = f"2.{rng.randint(0, 20)}.{rng.randint(0, 3)}"
        form = rng.choice(FORMS).format(v=version)
        if name.endswith(".py"):  # in Python, a requirement is a string: "torch==2.7.0"
            form = f"x = [{form.replace('pytorch=', 'torch==')!r}]"
        assert could_move_torch(form, name), form
        lines.insert(rng.randint(0, len(lines)), form)
        head = {name: "\n".join(lines) + "\n", "app.py": APP}
        if rng.random() < 0.3:  # or the line moves from one version to another
            base = {name: head[name].replace(version, "1.13.1"), "app.py": APP}
        result = detect_bump(base, head)
        assert result is not None, (case, name, form)


def test_environments_that_pin_different_torches_on_purpose() -> None:
    """An inference server's images pin different torches; a change that moves one of them is
    that image's from -> to, whatever the others pin. Two environments moved differently are
    unknown, naming both."""
    base = {
        "Dockerfile": "FROM debian:12\nRUN pip install torch==2.6.0\n",
        "Dockerfile.neuron": "FROM debian:12\nRUN pip install torch==2.5.1\n",
        "server/requirements.txt": "torch==2.6.0\n",
    }
    one = detect_bump(
        base, {**base, "Dockerfile.neuron": base["Dockerfile.neuron"].replace("2.5.1", "2.7.0")}
    )
    assert one is not None and one.status == "changed", one
    assert (one.baseline, one.candidate) == ("torch==2.5.1", "torch==2.7.0")
    assert {env: (b, c) for env, b, c in one.environments} == {  # each environment, as found
        "Dockerfile": ("torch==2.6.0", "torch==2.6.0"),
        "Dockerfile.neuron": ("torch==2.5.1", "torch==2.7.0"),
        "server": ("torch==2.6.0", "torch==2.6.0"),
    }
    both = detect_bump(
        base,
        {**base, "Dockerfile.neuron": base["Dockerfile.neuron"].replace("2.5.1", "2.7.0"),
         "Dockerfile": base["Dockerfile"].replace("2.6.0", "2.8.0")},
    )  # fmt: skip
    assert both is not None and both.status == "unknown", both
    assert "environments moved differently" in both.message
    assert "Dockerfile.neuron: torch==2.5.1 (Dockerfile.neuron:2) -> torch==2.7.0" in both.message
    assert "server/requirements.txt" not in both.message  # an environment that did not move


CACHE = (
    "jobs:\n  t:\n    runs-on: ubuntu-{os}\n    steps:\n"
    "      - run: pip install --cache-dir $TORCH_CACHE torch==2.7.0\n"
)
BUILD_ARG = "FROM debian:{os}\nARG CUDA_TAG\nRUN pip install torch=={v}+${{CUDA_TAG}}\n"
WHEEL = (
    "torch @ https://download.pytorch.org/whl/cu128/torch-{v}%2Bcu128-{py}-{py}-linux_x86_64.whl"
)


@pytest.mark.parametrize(
    ("base", "head", "answer"),
    [
        # An organization with pytorch in its name says nothing of the package: no torch here.
        ({"requirements.txt": "torch==2.6.0\n"},
         {"requirements.txt": "torch==2.6.0\ngit+https://github.com/pytorch-labs/sam-fast.git\n"},
         ("unchanged", "torch==2.6.0", "torch==2.6.0")),
        # ==2.14.1 admits 2.14.1+cu128 (PEP 440): one torch, not two files that disagree.
        ({"requirements.txt": "torch==2.13.0\n", "requirements-cuda.txt": "torch==2.13.0+cu128\n"},
         {"requirements.txt": "torch==2.14.1\n", "requirements-cuda.txt": "torch==2.14.1+cu128\n"},
         ("changed", "torch==2.13.0+cu128", "torch==2.14.1+cu128")),
        # One torch's wheel for each Python, in one file: one version.
        ({"requirements.txt": "\n".join(WHEEL.format(v="2.7.0", py=p) + f' ; python_version == "3.{p[3:]}"'
                                        for p in ("cp310", "cp311")) + "\n"},
         {"requirements.txt": "\n".join(WHEEL.format(v="2.8.0", py=p) + f' ; python_version == "3.{p[3:]}"'
                                        for p in ("cp310", "cp311")) + "\n"},
         ("changed", WHEEL.format(v="2.7.0", py="cp310"), WHEEL.format(v="2.8.0", py="cp310"))),
        # A value of pip's --cache-dir is no requirement, whatever its variable's name.
        ({".github/workflows/ci.yml": CACHE.format(os="22.04")},
         {".github/workflows/ci.yml": CACHE.format(os="24.04")},
         ("unchanged", None, None)),
        # A Dockerfile whose torch needs a build argument, on both sides alike: an unrelated
        # change is no torch change (the scan answers for the lines).
        ({"Dockerfile": BUILD_ARG.format(os="12", v="2.7.0")},
         {"Dockerfile": BUILD_ARG.format(os="13", v="2.7.0")},
         ("unchanged", None, None)),
        ({"Dockerfile": BUILD_ARG.format(os="12", v="2.7.0")},
         {"Dockerfile": BUILD_ARG.format(os="12", v="2.8.0")},
         ("unknown", None, None)),
    ],
    ids=["org-named-pytorch", "local-label-admitted", "wheel-per-python", "pip-option-value",
         "build-arg-alike", "build-arg-moved"],
)  # fmt: skip
def test_what_was_a_spurious_unknown_is_answered(
    base: dict[str, str], head: dict[str, str], answer: tuple[str, str, str]
) -> None:
    result = detect_bump(base, head)
    status = result.status if result else "unchanged"
    assert status == answer[0], result
    if result is not None and status != "unknown":
        assert (result.baseline, result.candidate) == answer[1:]


@pytest.mark.parametrize(
    ("old", "new", "answer"),
    [
        ("rocm/pytorch:rocm6.1_ubuntu22.04_py3.10_pytorch_2.1.2",
         "rocm/pytorch:rocm6.2_ubuntu22.04_py3.10_pytorch_2.3.0", ("torch==2.1.2", "torch==2.3.0")),
        ("mosaicml/pytorch:2.6.0_cu124-python3.12-ubuntu22.04",
         "mosaicml/pytorch:2.7.0_cu128-python3.12-ubuntu22.04", ("torch==2.6.0", "torch==2.7.0")),
        ("rocm/pytorch:rocm6.1_ubuntu22.04_py3.10_pytorch_2.1.2", "rocm/pytorch:latest", None),
        ("team/torch-base:v3", "team/torch-base:v4", None),
    ],
    ids=["rocm", "mosaicml", "rocm-latest", "other-torch-image"],
)  # fmt: skip
def test_images_with_torch_in_their_name(
    old: str, new: str, answer: tuple[str, str] | None
) -> None:
    """Known images are mapped to the torch their tag names; any other image with torch in its
    name whose tag does not say which is unknown, never no torch."""
    result = detect_bump({"Dockerfile": f"FROM {old}\n"}, {"Dockerfile": f"FROM {new}\n"})
    assert result is not None
    if answer is None:
        assert result.status == "unknown", result
    else:
        assert (result.status, result.baseline, result.candidate) == ("changed", *answer)


def test_a_from_that_names_an_earlier_stage_is_no_image() -> None:
    """FROM pytorch-install, a stage of the same file: its torch was read in that stage."""
    stages = "FROM debian:12 AS pytorch-install\nRUN pip install torch=={}\nFROM pytorch-install\n"
    assert detect_bump({"Dockerfile": stages.format("2.6.0") + "RUN echo 1\n"},
                       {"Dockerfile": stages.format("2.6.0") + "RUN echo 2\n"}) is None  # fmt: skip
    moved = detect_bump(
        {"Dockerfile": stages.format("2.6.0")}, {"Dockerfile": stages.format("2.7.0")}
    )
    assert moved is not None and (moved.baseline, moved.candidate) == (
        "torch==2.6.0",
        "torch==2.7.0",
    )
