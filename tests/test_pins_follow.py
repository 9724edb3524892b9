"""Torch pins that are reached, not written in place: symlinked pin files, -r/-c includes,
Dockerfile ARG/ENV values, git and URL sources. Each shape is a real repository whose last commit
moves torch only there; the answer is `changed` or `unknown` naming the file, never "no torch
change". The property at the end holds for every fixture case in tests/fixtures/pins."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from suite.cli.ci import pins_command
from suite.pins.assess import assess, tree_at_ref, tree_of

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")

FIXTURES = Path(__file__).parent / "fixtures" / "pins"


class Link(str):
    """A symlink to be committed, holding its target as written."""


Files = dict[str, "str | Link"]


def _git(repo: Path, *args: str) -> None:
    env = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
    subprocess.run(
        ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.invalid", *args],
        check=True,
        capture_output=True,
        env=env,
        timeout=60,
    )


def _commit(root: Path, files: Files, message: str) -> None:
    """Commit exactly these files (the previous side's files are removed first)."""
    for old in root.iterdir():
        if old.name == ".git":
            continue
        if old.is_dir() and not old.is_symlink():
            shutil.rmtree(old)
        else:
            old.unlink()
    for path, content in files.items():
        target = root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, Link):
            os.symlink(content, target)
        else:
            target.write_text(content)
    _git(root, "add", "-A")
    _git(root, "commit", "-q", "--allow-empty", "-m", message)


def _repo(tmp_path: Path, base: Files, head: Files) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    _git(root, "init", "-q")
    _commit(root, base, "base")
    _commit(root, head, "head")
    return root


def _pins(tmp_path: Path, base: Files, head: Files) -> dict[str, object]:
    root = _repo(tmp_path, base, head)
    argv = ["--base", "HEAD~1", "--head", "HEAD", "--repo", str(root), "--json"]
    result = CliRunner().invoke(pins_command, argv, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    record: dict[str, object] = json.loads(result.stdout)
    return record


def _side(case: str, side: str) -> dict[str, str]:
    folder = FIXTURES / case / side
    return {
        f.relative_to(folder).as_posix(): f.read_text() for f in folder.rglob("*") if f.is_file()
    }


def _unknown(record: dict[str, object]) -> list[dict[str, str]]:
    entries = record["unknown"]
    assert isinstance(entries, list)
    return entries


UV_BASE = (FIXTURES / "uv-lock" / "base" / "uv.lock").read_text()
UV_HEAD = (FIXTURES / "uv-lock" / "head" / "uv.lock").read_text()


# Symlinked pin files ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("link", "target", "base_text", "head_text"),
    [
        ("uv.lock", "locks/linux.lock", UV_BASE, UV_HEAD),
        ("requirements.txt", "reqs/base.txt", "torch==2.13.0\n", "torch==2.14.1\n"),
    ],
    ids=["uv.lock", "requirements.txt"],
)
def test_a_symlinked_pin_file_moved_only_in_its_target_is_changed(
    tmp_path: Path, link: str, target: str, base_text: str, head_text: str
) -> None:
    record = _pins(
        tmp_path,
        {link: Link(target), target: base_text},
        {link: Link(target), target: head_text},
    )
    assert record["status"] == "changed", record
    assert (record["baseline"], record["candidate"]) == ("torch==2.13.0", "torch==2.14.1")
    assert record["files"] == [link] and link in str(record["message"])


def test_a_chain_of_symlinks_and_a_symlinked_folder_are_followed(tmp_path: Path) -> None:
    def side(version: str) -> Files:
        return {
            "requirements.txt": Link("ci/current.txt"),
            "ci": Link("config/reqs"),
            "config/reqs/current.txt": Link("../pinned/torch.txt"),
            "config/pinned/torch.txt": f"torch=={version}\n",
        }

    record = _pins(tmp_path, side("2.13.0"), side("2.14.1"))
    assert record["status"] == "changed", record
    assert record["files"] == ["requirements.txt"]


@pytest.mark.parametrize(
    ("target", "says"),
    [
        ("/etc/pip/requirements.txt", "symlink pointing outside the repository"),
        ("../../outside/requirements.txt", "symlink pointing outside the repository"),
        ("reqs/gone.txt", "symlink pointing to nothing"),
        ("requirements.txt", "more than 40 symlinks"),
    ],
)
def test_a_symlink_that_cannot_be_followed_is_unknown_not_a_removed_pin(
    tmp_path: Path, target: str, says: str
) -> None:
    record = _pins(
        tmp_path,
        {"requirements.txt": "torch==2.13.0\n"},
        {"requirements.txt": Link(target)},
    )
    assert record["status"] == "unknown" and record["run"] is True, record
    [entry] = _unknown(record)
    assert (entry["file"], entry["side"]) == ("requirements.txt", "head")
    assert says in entry["reason"] and "not read" in entry["reason"]
    assert "removed" not in str(record["message"])


def test_a_link_out_of_the_repository_on_both_sides_is_no_change(tmp_path: Path) -> None:
    side: Files = {"requirements.txt": Link("/etc/pip/requirements.txt"), "README.md": "a\n"}
    record = _pins(tmp_path, side, {**side, "README.md": "b\n"})
    assert record["status"] == "unchanged", record


# Includes -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("case", "included"),
    [("include-requirement", "deps/base.txt"), ("include-constraint", "constraints/torch.txt")],
)
def test_a_torch_pin_moved_only_in_an_included_file_is_changed(
    tmp_path: Path, case: str, included: str
) -> None:
    base, head = _side(case, "base"), _side(case, "head")
    assert base["requirements.txt"] == head["requirements.txt"]
    record = _pins(tmp_path, dict(base), dict(head))
    assert record["status"] == "changed", record
    assert (record["baseline"], record["candidate"]) == ("torch==2.13.0", "torch==2.14.1")
    assert record["files"] == sorted([included, "requirements.txt"])
    assert included in str(record["message"]) and "requirements.txt" in str(record["message"])


def test_includes_of_includes_resolve_from_each_files_folder(tmp_path: Path) -> None:
    def side(version: str) -> Files:
        return {
            "services/api/requirements.txt": "-r ../../deps/common.txt\n",
            "deps/common.txt": "--requirement torch/pin.txt\n",
            "deps/torch/pin.txt": f"torch=={version}\n",
        }

    record = _pins(tmp_path, side("2.13.0"), side("2.14.1"))
    assert record["status"] == "changed", record
    files = record["files"]
    assert isinstance(files, list) and "services/api/requirements.txt" in files
    assert "deps/torch/pin.txt" in files


def test_an_include_loop_ends_and_is_unknown(tmp_path: Path) -> None:
    def side(version: str) -> Files:
        return {
            "requirements.txt": "-r deps/a.txt\n",
            "deps/a.txt": f"-r ../requirements.txt\ntorch=={version}\n",
        }

    record = _pins(tmp_path, side("2.13.0"), side("2.14.1"))
    assert record["status"] == "unknown", record
    reasons = [e["reason"] for e in _unknown(record) if e["file"] == "requirements.txt"]
    assert reasons and all("loop" in r and "deps/a.txt" in r for r in reasons)


@pytest.mark.parametrize(
    ("include", "says"),
    [
        ("-r deps/gone.txt", "deps/gone.txt does not exist"),
        ("-c https://example.invalid/constraints.txt", "includes a URL"),
        ("-r ../../elsewhere.txt", "leaves the repository"),
        ("-r ${PIN_FILE}", "environment variable"),
    ],
)
def test_an_include_that_cannot_be_read_is_unknown_naming_both_files(
    tmp_path: Path, include: str, says: str
) -> None:
    base: Files = {"requirements.txt": "-r deps/base.txt\n", "deps/base.txt": "torch==2.13.0\n"}
    head: Files = {**base, "requirements.txt": f"{include}\n"}
    record = _pins(tmp_path, base, head)
    assert record["status"] == "unknown", record
    [entry] = _unknown(record)
    assert (entry["file"], entry["side"]) == ("requirements.txt", "head")
    assert says in entry["reason"] and include.split()[1] in entry["reason"]


def test_an_included_file_that_goes_missing_alone_is_unknown(tmp_path: Path) -> None:
    """The including file is unchanged; its include disappearing is still a change of it."""
    base: Files = {"requirements.txt": "-r deps/base.txt\n", "deps/base.txt": "torch==2.13.0\n"}
    record = _pins(tmp_path, base, {"requirements.txt": "-r deps/base.txt\n"})
    assert record["status"] == "unknown", record
    assert "requirements.txt (head): -r deps/base.txt" in str(record["message"])


# Dockerfile ARG and ENV -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "declare",
    [
        "ENV TORCH_VERSION={v}",
        "ENV TORCH_VERSION {v}",
        'ENV PIP_NO_CACHE_DIR=1 TORCH_VERSION="{v}" LANG=C.UTF-8',
        "ARG TORCH_VERSION={v}",
        "ARG TORCH_MAJOR_MINOR={mm}\nENV TORCH_VERSION=${{TORCH_MAJOR_MINOR}}.{patch}",
    ],
)
def test_a_dockerfile_torch_from_an_env_or_arg_value_is_read(tmp_path: Path, declare: str) -> None:
    def side(v: str) -> Files:
        mm, patch = v.rsplit(".", 1)
        lines = declare.format(v=v, mm=mm, patch=patch)
        text = f"FROM python:3.11-slim\n{lines}\nRUN pip install torch==${{TORCH_VERSION}}\n"
        return {"Dockerfile": text}

    record = _pins(tmp_path, side("2.13.0"), side("2.14.1"))
    assert record["status"] == "changed", record
    assert (record["baseline"], record["candidate"]) == ("torch==2.13.0", "torch==2.14.1")
    assert record["files"] == ["Dockerfile"]


def test_a_shell_variable_elsewhere_in_the_command_does_not_hide_the_pin(tmp_path: Path) -> None:
    record = _pins(
        tmp_path, _side("dockerfile-cd-home", "base"), _side("dockerfile-cd-home", "head")
    )
    assert record["status"] == "changed", record
    assert (record["baseline"], record["candidate"]) == ("torch==2.13.0", "torch==2.14.1")
    assert "Dockerfile" in str(record["message"])


def test_a_torch_word_with_a_variable_of_no_known_value_is_unknown(tmp_path: Path) -> None:
    base: Files = {"Dockerfile": "FROM python:3.11\nRUN pip install torch==2.13.0\n"}
    head: Files = {
        "Dockerfile": "FROM python:3.11\nARG TORCH_VERSION\nRUN pip install torch==${TORCH_VERSION}\n"
    }
    record = _pins(tmp_path, base, head)
    assert record["status"] == "unknown", record
    [entry] = _unknown(record)
    assert (entry["file"], entry["side"]) == ("Dockerfile", "head")
    assert "line 3" in entry["reason"] and "TORCH_VERSION" in entry["reason"]


# git and URL sources --------------------------------------------------------------------------


@pytest.mark.parametrize("key", ["tag", "rev", "branch"])
def test_a_moved_poetry_git_source_is_changed(tmp_path: Path, key: str) -> None:
    def side(ref: str) -> Files:
        text = (
            '[tool.poetry.dependencies]\npython = "^3.11"\n'
            f'torch = {{git = "https://github.com/pytorch/pytorch.git", {key} = "{ref}"}}\n'
        )
        return {"pyproject.toml": text}

    record = _pins(tmp_path, side("v2.13.0"), side("v2.14.1"))
    assert record["status"] == "changed", record
    assert record["candidate"] == "torch @ git+https://github.com/pytorch/pytorch.git@v2.14.1"
    assert record["files"] == ["pyproject.toml"]


@pytest.mark.parametrize("case", ["uv-sources-git", "uv-sources-url"])
def test_a_moved_uv_source_is_changed(tmp_path: Path, case: str) -> None:
    record = _pins(tmp_path, _side(case, "base"), _side(case, "head"))
    assert record["status"] == "changed", record
    assert "2.14.1" in str(record["candidate"]) and str(record["candidate"]).startswith("torch @")
    assert record["files"] == ["pyproject.toml"]


@pytest.mark.parametrize(
    "line",
    [
        "torch @ https://download.pytorch.org/whl/cpu/torch-{v}%2Bcpu-cp311-cp311-linux_x86_64.whl",
        "torch @ git+https://github.com/pytorch/pytorch@v{v}",
        "https://download.pytorch.org/whl/cpu/torch-{v}%2Bcpu-cp311-cp311-linux_x86_64.whl",
        "git+https://github.com/pytorch/pytorch@v{v}#egg=torch",
        "-e git+https://github.com/pytorch/pytorch@v{v}#egg=torch",
    ],
)
def test_a_moved_direct_reference_is_changed(tmp_path: Path, line: str) -> None:
    def side(v: str) -> Files:
        return {"requirements.txt": f"numpy==2.1.0\n{line.format(v=v)}\n"}

    record = _pins(tmp_path, side("2.13.0"), side("2.14.1"))
    assert record["status"] == "changed", record
    assert record["files"] == ["requirements.txt"]
    assert "2.14.1" in str(record["candidate"])


@pytest.mark.parametrize(
    ("file", "text", "says"),
    [
        (
            "pyproject.toml",
            '[tool.poetry.dependencies]\ntorch = {path = "../pytorch-VERSION"}\n',
            "$.tool.poetry.dependencies.torch: installs from a path source",
        ),
        (
            "pyproject.toml",
            '[project]\nname = "a"\ndependencies = ["torch"]\n'
            '[tool.uv.sources]\ntorch = { path = "wheels/torch-VERSION.whl" }\n',
            "$.tool.uv.sources.torch: installs from a path source",
        ),
        (
            "requirements.txt",
            "git+https://github.com/pytorch/pytorch@vVERSION\n",
            "installs from a URL that names no package",
        ),
    ],
    ids=["poetry-path", "uv-path", "url-without-a-name"],
)
def test_a_source_that_cannot_be_interpreted_is_unknown_naming_the_file(
    tmp_path: Path, file: str, text: str, says: str
) -> None:
    base: Files = {file: text.replace("VERSION", "2.13.0")}
    head: Files = {file: text.replace("VERSION", "2.14.1")}
    record = _pins(tmp_path, base, head)
    assert record["status"] == "unknown", record
    assert any(e["file"] == file and says in e["reason"] for e in _unknown(record)), record


# The property ---------------------------------------------------------------------------------

# The torch each fixture side installs, as a person reading the files would say it.
INSTALLED = {
    "comment-only": ("torch==2.13.0", "torch==2.13.0"),
    "conda": ("torch==2.13.0", "torch==2.14.1"),
    "dockerfile": ("torch==2.13.0", "torch==2.14.1"),
    "dockerfile-cd-home": ("torch==2.13.0", "torch==2.14.1"),
    "dockerfile-env": ("torch==2.13.0", "torch==2.14.1"),
    "dockerfile-pip": ("torch==2.13.0", "torch==2.14.1"),
    "include-constraint": ("torch==2.13.0", "torch==2.14.1"),
    "include-requirement": ("torch==2.13.0", "torch==2.14.1"),
    "malformed-uv-lock": ("torch==2.13.0", "nothing: uv refuses a lock that does not parse"),
    "ngc-image": ("torch of NGC 25.01", "torch of NGC 25.03"),
    "pdm-lock": ("torch==2.13.0", "torch==2.14.1"),
    "pipfile-lock": ("torch==2.13.0", "torch==2.14.1"),
    "pixi-lock": ("torch==2.13.0", "torch==2.14.1"),
    "pixi-lock-future": ("torch==2.13.0", "torch==2.14.1"),
    "pixi-manifest": ("torch==2.13.0", "torch==2.14.1"),
    "poetry-git": ("pytorch at v2.13.0", "pytorch at v2.14.1"),
    "poetry-lock": ("torch==2.13.0", "torch==2.14.1"),
    "pylock": ("torch==2.13.0", "torch==2.14.1"),
    "requirements-url": ("pytorch at v2.13.0", "pytorch at v2.14.1"),
    "unrelated-section": ("torch==2.13.0", "torch==2.13.0"),
    "uv-lock": ("torch==2.13.0", "torch==2.14.1"),
    "uv-sources-git": ("pytorch at v2.13.0", "pytorch at v2.14.1"),
    "uv-sources-url": ("torch==2.13.0+cpu", "torch==2.14.1+cpu"),
}


def _linked(link: str, target: str, text: str) -> Files:
    return {link: Link(target), target: text}


# Shapes no fixture folder can hold (symlinks), or variants of one, with what each side installs.
SHAPES: dict[str, tuple[Files, Files, tuple[str, str]]] = {
    "symlinked-uv-lock": (
        _linked("uv.lock", "locks/linux.lock", UV_BASE),
        _linked("uv.lock", "locks/linux.lock", UV_HEAD),
        ("torch==2.13.0", "torch==2.14.1"),
    ),
    "symlink-retargeted": (
        {"uv.lock": Link("locks/a.lock"), "locks/a.lock": UV_BASE, "locks/b.lock": UV_HEAD},
        {"uv.lock": Link("locks/b.lock"), "locks/a.lock": UV_BASE, "locks/b.lock": UV_HEAD},
        ("torch==2.13.0", "torch==2.14.1"),
    ),
    "symlink-out-of-repo": (
        {"requirements.txt": "torch==2.13.0\n"},
        {"requirements.txt": Link("/opt/team/requirements.txt")},
        ("torch==2.13.0", "whatever /opt/team/requirements.txt pins"),
    ),
    "included-through-a-symlink": (
        {"requirements.txt": "-r deps.txt\n", "deps.txt": Link("pins/torch.txt")}
        | {"pins/torch.txt": "torch==2.13.0\n"},
        {"requirements.txt": "-r deps.txt\n", "deps.txt": Link("pins/torch.txt")}
        | {"pins/torch.txt": "torch==2.14.1\n"},
        ("torch==2.13.0", "torch==2.14.1"),
    ),
    "dockerfile-env-old-form": (
        {
            "Dockerfile": "FROM python:3.11\nENV TORCH_VERSION 2.13.0\nRUN pip install torch==$TORCH_VERSION\n"
        },
        {
            "Dockerfile": "FROM python:3.11\nENV TORCH_VERSION 2.14.1\nRUN pip install torch==$TORCH_VERSION\n"
        },
        ("torch==2.13.0", "torch==2.14.1"),
    ),
    "dockerfile-stage-inherits-env": (
        {
            "Dockerfile": "FROM python:3.11 AS base\nENV TV=2.13.0\nFROM base\nRUN pip install torch==$TV\n"
        },
        {
            "Dockerfile": "FROM python:3.11 AS base\nENV TV=2.14.1\nFROM base\nRUN pip install torch==$TV\n"
        },
        ("torch==2.13.0", "torch==2.14.1"),
    ),
}


def _cases() -> list[str]:
    return sorted(p.name for p in FIXTURES.iterdir() if (p / "base").is_dir())


def test_the_installed_torch_table_covers_every_fixture_case() -> None:
    assert sorted(INSTALLED) == _cases()


@pytest.mark.parametrize("case", _cases() + sorted(SHAPES))
def test_a_side_that_installs_another_torch_is_never_no_torch_change(
    tmp_path: Path, case: str
) -> None:
    if case in SHAPES:
        base, head, (was, now) = SHAPES[case]
    else:
        base, head = dict(_side(case, "base")), dict(_side(case, "head"))
        was, now = INSTALLED[case]
    root = _repo(tmp_path, base, head)
    answers = {"git": assess(tree_at_ref(root, "HEAD~1"), tree_at_ref(root, "HEAD")).status}
    if not any(isinstance(v, Link) for v in {**base, **head}.values()):
        texts = {k: str(v) for k, v in base.items()}, {k: str(v) for k, v in head.items()}
        answers["memory"] = assess(tree_of(texts[0]), tree_of(texts[1])).status
    for where, status in answers.items():
        if was != now:
            assert status != "unchanged", (case, where)
        else:
            assert status != "changed", (case, where)
