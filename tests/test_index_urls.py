"""Index URLs end to end: a pin's --index-url reaches the venv side and the image build, is part of
both cache keys, and a credential in it (user:token@) is used where pip installs and appears in
no file, layer, log or output.

The install tests serve the local wheels of torch 2.13.0 (TORCH_MATRIX_TEST_WHEELS, which
.ci/docker-setup.sh fills) from a PEP 503 index on loopback behind basic auth, with pip's own
configuration turned off so that the index is the only place pip can install from.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from suite.core.errors import InputError
from suite.execute.images import Recipe, recipe_key
from suite.execute.indexes import Indexes
from suite.execute.sides import prepare, venv_path
from tests.helpers import REPO, cli, docker_works
from tests.pep503 import Index

USER, TOKEN = "ci-reader", "s3cr3t-Index-Token-0451"
WHEELS = Path(os.environ.get("TORCH_MATRIX_TEST_WHEELS", "/nonexistent")) / "torch-2.13.0"


def _key(url: str | None) -> str:
    recipe = Recipe("cpu", "2.13.0", indexes=Indexes(url))
    return recipe_key(recipe, "sha256:" + "0" * 64, "sha256:" + "1" * 64, None, "FROM x\n")


def test_changing_only_the_index_changes_both_cache_keys_and_a_token_does_not() -> None:
    one = "https://pypi.example.com/simple"
    other = "https://mirror.example.com/simple"
    with_token = f"https://{USER}:{TOKEN}@pypi.example.com/simple"
    assert _key(one) != _key(other) != _key(None)
    assert _key(one) == _key(with_token)  # the credential is not the index
    venv = {url: venv_path("torch==2.13.0", sys.executable, Indexes(url)) for url in (one, other)}
    assert venv[one] != venv[other]
    assert venv[one] == venv_path("torch==2.13.0", sys.executable, Indexes(with_token))
    assert venv_path("torch==2.13.0", sys.executable, Indexes()) not in venv.values()


def test_a_credential_is_expanded_at_use_and_nowhere_else(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INDEX_TOKEN", TOKEN)
    written = Indexes("https://user:${INDEX_TOKEN}@pypi.example.com/simple", ("https://x/simple",))
    assert written.pip_env() == {
        "PIP_INDEX_URL": f"https://user:{TOKEN}@pypi.example.com/simple",
        "PIP_EXTRA_INDEX_URL": "https://x/simple",
    }
    assert TOKEN not in json.dumps(written.public()) and TOKEN not in written.shown()
    assert written.needs_secret()
    recipe = Recipe("cpu", "2.13.0", indexes=written)
    assert TOKEN not in json.dumps(recipe.public()) and TOKEN not in json.dumps(recipe.build_args())
    assert TOKEN in recipe.secret_lines()  # the one place it goes: the build secret


def test_an_index_that_cannot_be_used_is_refused_with_what_to_do(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("INDEX_TOKEN", raising=False)
    with pytest.raises(InputError, match="INDEX_TOKEN, which the environment does not set"):
        Indexes("https://u:${INDEX_TOKEN}@h/simple").expanded()
    with pytest.raises(InputError, match="masked credential"):
        Indexes("https://***@h/simple").expanded()  # what a masked output would pass on
    with pytest.raises(InputError, match="applies to a torch requirement side"):
        prepare("current", "baseline", indexes=Indexes("https://h/simple"))


def _no_pip_config(monkeypatch: pytest.MonkeyPatch) -> None:
    """pip's own configuration (extra indexes, find-links) off: only the given index remains."""
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    for name in ("PIP_FIND_LINKS", "PIP_EXTRA_INDEX_URL", "PIP_INDEX_URL", "PIP_NO_INDEX"):
        monkeypatch.delenv(name, raising=False)


def _needs_wheels() -> None:
    if not (
        WHEELS / "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl"
    ).exists() and not list(WHEELS.glob("torch-2.13.0*.whl")):
        pytest.skip("TORCH_MATRIX_TEST_WHEELS holds no torch 2.13.0 wheels (.ci/docker-setup.sh)")
    if sys.version_info[:2] != (3, 11):
        pytest.skip("the wheel cache is for CPython 3.11")


def _absent_everywhere(secret: str, *roots: Path, texts: tuple[str, ...] = ()) -> None:
    for text in texts:
        assert secret not in text
    for root in roots:
        for path in [root] if root.is_file() else root.rglob("*"):
            if path.is_file() and path.stat().st_size < 50 << 20:
                assert secret.encode() not in path.read_bytes(), path
            assert secret not in str(path)


@pytest.mark.slow
def test_a_venv_side_installs_from_the_pins_index(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _needs_wheels()
    _no_pip_config(monkeypatch)
    monkeypatch.setenv("TORCH_MATRIX_CACHE", str(tmp_path / "cache"))
    log = tmp_path / "prepare.log"
    with Index(WHEELS, USER, TOKEN) as index:
        side = prepare(
            "torch==2.13.0", "baseline", log=log, indexes=Indexes(index.url(f"{USER}:{TOKEN}"))
        )
    assert [r.authorized for r in index.served("torch")] and all(
        r.authorized for r in index.served("torch")
    ), index.requests  # pip asked the index, with the credential
    assert any(r.path.startswith("/files/torch-2.13.0") for r in index.requests)
    version = subprocess.run(
        [side.interpreter, "-c", "import torch; print(torch.__version__)"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    assert version.startswith("2.13.0")
    assert f"127.0.0.1:{index.port}" in side.label and "***@" in side.label
    _absent_everywhere(TOKEN, tmp_path / "cache", log, texts=(side.label, side.interpreter))


@pytest.mark.docker
@pytest.mark.skipif(not docker_works(), reason="`docker info` fails: no Docker daemon here")
@pytest.mark.skipif(
    not os.environ.get("TORCH_MATRIX_TEST_BASE"),
    reason="TORCH_MATRIX_TEST_BASE is unset (.ci/docker-setup.sh builds the offline base)",
)
def test_an_image_builds_from_the_pins_index_and_keeps_no_credential(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _needs_wheels()
    record, log = tmp_path / "image.json", tmp_path / "build.log"
    with Index(WHEELS, USER, TOKEN) as index:
        code, stdout, stderr = cli(
            "image", "build", "--backend", "cpu", "--torch", "2.13.0",
            "--base", os.environ["TORCH_MATRIX_TEST_BASE"], "--no-pull", "--no-smoke",
            "--index-url", index.url(f"{USER}:{TOKEN}"), "--context", str(REPO),
            "--record", str(record), "--log", str(log),
        )  # fmt: skip
    assert code == 0, stderr + (log.read_text() if log.exists() else "")
    served = index.served("torch")
    assert served and all(r.authorized for r in served), index.requests
    doc = json.loads(record.read_text())
    assert doc["recipe"]["index_url"] == index.url() and doc["recipe"]["credentials"] is True
    assert stdout.strip() == doc["side"]
    history = subprocess.run(
        ["docker", "history", "--no-trunc", doc["tag"]], capture_output=True, text=True, check=True
    ).stdout
    inspect = subprocess.run(
        ["docker", "image", "inspect", doc["tag"]], capture_output=True, text=True, check=True
    ).stdout
    assert index.url() in history  # the credential-free URL keys the torch layer
    _absent_everywhere(TOKEN, record, log, texts=(history, inspect, stdout, stderr))
    # The image's own pip configuration keeps nothing of the index either.
    try:
        config = subprocess.run(
            ["docker", "run", "--rm", "--network", "none", "--entrypoint", "sh", doc["tag"], "-c",
             "env; cat /etc/pip.conf ~/.config/pip/pip.conf /opt/venv/pip.conf 2>/dev/null; true"],
            capture_output=True, text=True, check=True,
        ).stdout  # fmt: skip
    finally:  # an image of its own (another torch layer): not left behind on the machine
        subprocess.run(["docker", "rmi", "-f", doc["tag"]], capture_output=True, check=False)
    assert TOKEN not in config and USER not in config
