"""What one job leaves on a runner that keeps its caches cannot become a later job's baseline: a
side venv that changed since it was built is rebuilt (a venv side runs the pull request's code
inside it), a wheel replaced by another of the same size keys another image, and a base image is
taken by its digest, never by a local tag that an earlier job could have moved."""

from __future__ import annotations

import io
import json
import subprocess
import tarfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from suite.core.errors import InputError
from suite.execute import sides
from suite.execute.bases import resolve_base
from suite.execute.images import wheel_listing
from suite.execute.manifest import differences, manifest_path, read_manifest
from tests.helpers import REPO, cli, docker_works

TORCH_INIT = "lib/python3/site-packages/torch/__init__.py"
ORIGINAL = "__version__ = '2.13.0'\n"
POISON = "torch-matrix-test-poison"


class FakeInstalls:
    """subprocess.run for the venv's build: `python -m venv` makes the interpreter, pip writes
    a one-file torch. Counts the builds."""

    def __init__(self) -> None:
        self.builds = 0

    def __call__(self, argv: list[str], **_: Any) -> subprocess.CompletedProcess[str]:
        if argv[1:4] == ["-I", "-m", "venv"]:
            self.builds += 1
            venv = Path(argv[-1])
            (venv / "bin").mkdir(parents=True)
            (venv / "bin" / "python").write_text("")
            (venv / "bin" / "python3").symlink_to("python")
        else:  # pip install, by the venv's interpreter
            torch = Path(argv[0]).parent.parent / TORCH_INIT
            torch.parent.mkdir(parents=True)
            torch.write_text(ORIGINAL)
            (torch.parent / "__pycache__").mkdir()
            (torch.parent / "__pycache__" / "__init__.cpython-311.pyc").write_bytes(b"\0" * 16)
        return subprocess.CompletedProcess(argv, 0, "", "")


@pytest.fixture
def installs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeInstalls:
    monkeypatch.setenv("TORCH_MATRIX_CACHE", str(tmp_path / "cache"))
    fake = FakeInstalls()
    monkeypatch.setattr(sides.subprocess, "run", fake)
    return fake


def _venv() -> Path:
    python, _ = sides.venv_for("torch==2.13.0")
    return python.parent.parent


def test_a_venv_is_reused_while_it_holds_what_it_was_built_with(
    installs: FakeInstalls, capsys: pytest.CaptureFixture[str]
) -> None:
    venv = _venv()
    recorded = read_manifest(venv)
    assert recorded is not None and TORCH_INIT in recorded
    assert recorded["bin/python3"] == "link:python"
    assert manifest_path(venv).parent == venv.parent  # beside the venv, not inside it
    assert _venv() == venv and installs.builds == 1
    assert capsys.readouterr().err == ""


def test_a_changed_file_is_named_and_the_venv_is_rebuilt(
    installs: FakeInstalls, capsys: pytest.CaptureFixture[str]
) -> None:
    venv = _venv()
    (venv / TORCH_INIT).write_text("import os  # patched by a pull request's workload\n")
    assert _venv() == venv and installs.builds == 2
    err = capsys.readouterr().err
    assert f"venv cache {venv}: {TORCH_INIT} changed since it was built: rebuilding" in err
    assert (venv / TORCH_INIT).read_text() == ORIGINAL
    assert _venv() == venv and installs.builds == 2  # the rebuilt venv is trusted again
    assert capsys.readouterr().err == ""


SITE = "lib/python3/site-packages"


def _retarget(venv: Path) -> None:
    (venv / "bin/python3").unlink()
    (venv / "bin/python3").symlink_to("/usr/bin/python3")


PLANTS: dict[str, tuple[Callable[[Path], object], str]] = {
    "a .pth file": (lambda v: (v / SITE / "evil.pth").write_text("import evil\n"), "added"),
    # bytecode newer than its source shadows it; Python writes none into a venv pip compiled
    "a .pyc file": (lambda v: (v / SITE / "torch/__pycache__/x.pyc").write_bytes(b"0"), "added"),
    # an empty folder makes `import triton` find a namespace package
    "an empty folder": (lambda v: (v / SITE / "triton").mkdir(), "added"),
    "a removed file": (lambda v: (v / TORCH_INIT).unlink(), "missing"),
    "a retargeted link": (_retarget, "changed"),
}


@pytest.mark.parametrize("plant", sorted(PLANTS))
def test_an_added_missing_or_retargeted_entry_rebuilds_the_venv(
    installs: FakeInstalls, capsys: pytest.CaptureFixture[str], plant: str
) -> None:
    venv = _venv()
    change, said = PLANTS[plant]
    change(venv)
    found = differences(venv, read_manifest(venv) or {})
    assert len(found) == 1 and found[0].endswith(f" {said}"), found
    _venv()
    assert installs.builds == 2
    assert f"{found[0]} since it was built: rebuilding" in capsys.readouterr().err
    assert differences(venv, read_manifest(venv) or {}) == []


def test_a_venv_without_a_manifest_is_rebuilt(
    installs: FakeInstalls, capsys: pytest.CaptureFixture[str]
) -> None:
    """An older torch-matrix built it (a ready marker, no manifest), or the manifest is of a
    version this one does not read: nothing vouches for its content."""
    venv = _venv()
    manifest_path(venv).unlink()
    _venv()
    assert installs.builds == 2
    assert "no manifest" in capsys.readouterr().err and read_manifest(venv) is not None
    manifest_path(venv).write_text(json.dumps({"kind": "torch-matrix/venv-manifest"}))
    _venv()
    assert installs.builds == 3


def test_a_build_that_never_finished_is_rebuilt_silently(
    installs: FakeInstalls, capsys: pytest.CaptureFixture[str]
) -> None:
    venv = _venv()
    (venv / sides.READY).unlink()
    _venv()
    assert installs.builds == 2 and capsys.readouterr().err == ""


def test_a_wheel_replaced_by_another_of_the_same_size_changes_the_key(tmp_path: Path) -> None:
    wheel = tmp_path / "torch-2.13.0-cp311-cp311-linux_x86_64.whl"
    wheel.write_bytes(b"a" * 64)
    first = wheel_listing(tmp_path)
    wheel.write_bytes(b"b" * 64)
    assert wheel_listing(tmp_path) != first
    wheel.write_bytes(b"a" * 64)
    assert wheel_listing(tmp_path) == first  # the key follows the content, not the file


# --- base images ----------------------------------------------------------------------------


def _import(tag: str, content: bytes) -> str:
    """A one-file image made here (docker import), as the offline base is: no registry digest."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        info = tarfile.TarInfo("marker")
        info.size = len(content)
        tar.addfile(info, io.BytesIO(content))
    proc = subprocess.run(
        ["docker", "import", "-", tag], input=buffer.getvalue(), capture_output=True, check=True
    )
    return proc.stdout.decode().strip()


@pytest.fixture
def images() -> Iterator[tuple[str, str]]:
    """Two images A and B, and the tag POISON:base moved from A to B, as a job can leave it."""
    tags = [f"{POISON}:a", f"{POISON}:b", f"{POISON}:base"]
    try:
        first = _import(tags[0], b"the image the base was pinned to")
        second = _import(tags[1], b"an image an earlier job tagged over it")
        subprocess.run(["docker", "tag", second, tags[2]], capture_output=True, check=True)
        yield first, second
    finally:
        subprocess.run(["docker", "rmi", "-f", *tags], capture_output=True, check=False)


docker = pytest.mark.skipif(not docker_works(), reason="`docker info` fails: no Docker daemon here")


@pytest.mark.docker
@docker
def test_a_local_tag_moved_to_another_image_is_refused(images: tuple[str, str]) -> None:
    first, second = images
    with pytest.raises(InputError) as refused:
        resolve_base(f"{POISON}:base@{first}", pull=False)
    assert str(refused.value).startswith("--base: ")
    assert f"the local tag {POISON}:base points at {second}, not {first}: refused" in str(
        refused.value
    )
    pinned = resolve_base(f"{POISON}:base@{second}", pull=False)
    assert (pinned.reference, pinned.digest, pinned.digest_kind) == (
        f"{POISON}:base",
        second,
        "image-id",
    )
    assert pinned.layers  # what the built image must begin with


@pytest.mark.docker
@docker
def test_a_bare_local_tag_is_refused_with_how_to_pin_it(images: tuple[str, str]) -> None:
    with pytest.raises(InputError, match=r"--base: .*local tag with no registry digest") as bare:
        resolve_base(f"{POISON}:base", pull=True)  # refused before any pull
    assert f"docker image inspect --format '{{{{.Id}}}}' {POISON}:base" in str(bare.value)


@pytest.mark.docker
@docker
def test_image_build_refuses_a_moved_base_before_building(
    images: tuple[str, str], tmp_path: Path
) -> None:
    first, _ = images
    log = tmp_path / "build.log"
    code, _, stderr = cli(
        "image", "build", "--backend", "cpu", "--torch", "2.13.0",
        "--base", f"{POISON}:base@{first}", "--no-pull", "--no-smoke",
        "--context", str(REPO), "--log", str(log),
    )  # fmt: skip
    assert code == 2 and "--base" in stderr and "points at" in stderr, stderr
    assert not log.exists() or "$ " not in log.read_text()  # docker build never ran
