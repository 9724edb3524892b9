"""A pull request's indexes (class 5): the pins it writes may name an index of its own, beside the
team's credentialed one, and a package there that builds from source. Driven through `ab` as the
bench job runs it (TORCH_MATRIX_INDEX_HOSTS set, the credential in the environment), against real
pip and loopback indexes:

- an index on a host the base branch did not approve is not used at all: the side is refused
  before pip starts, the host is named, and the index hears nothing (not even without the
  credential), rather than the side being installed from the indexes that are left;
- a candidate's packages come as wheels only: an sdist on an approved index, whose build code
  would run with the credential in pip's environment, is never built (the control: pip without
  the rule builds it, and its planted build backend runs);
- one pip process holds one host's credential (tests/test_index_hosts.py has the unit cases).
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from suite.core.index_access import HOSTS_VAR
from tests.helpers import cli
from tests.pep503 import Index

SECRET = "hostile-Idx-S3cret-0451"


def _clean_pip(monkeypatch: pytest.MonkeyPatch) -> None:
    """pip's own configuration off: the given indexes are the only place it installs from."""
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    for name in ("PIP_FIND_LINKS", "PIP_EXTRA_INDEX_URL", "PIP_INDEX_URL", "PIP_NO_INDEX"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PIP_RETRIES", "0")
    monkeypatch.setenv("PIP_TIMEOUT", "5")
    monkeypatch.setenv("INDEX_TOKEN", SECRET)


def _sdist(folder: Path, marker: Path) -> None:
    """torch-99.0.tar.gz, whose in-tree build backend leaves a mark when it is imported: what
    a package's build code could do with the environment it runs in."""
    backend = (
        "import os\n"
        f"with open({str(marker)!r}, 'a') as fh:\n"
        "    seen = (k for k in os.environ if 'INDEX' in k or k.startswith('PIP_'))\n"
        "    fh.write(' '.join(sorted(seen)) + '\\n')\n"
        "def get_requires_for_build_wheel(config_settings=None):\n    return []\n"
        "def prepare_metadata_for_build_wheel(d, config_settings=None):\n"
        "    raise RuntimeError('planted backend')\n"
    )
    project = (
        '[build-system]\nrequires = []\nbuild-backend = "planted_backend"\nbackend-path = ["."]\n'
        '[project]\nname = "torch"\nversion = "99.0"\n'
    )
    pkg_info = "Metadata-Version: 2.1\nName: torch\nVersion: 99.0\n"
    with tarfile.open(folder / "torch-99.0.tar.gz", "w:gz") as tar:
        for name, text in {
            "pyproject.toml": project,
            "planted_backend.py": backend,
            "PKG-INFO": pkg_info,
        }.items():
            data = text.encode()
            info = tarfile.TarInfo(f"torch-99.0/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def test_an_unapproved_index_is_not_used_and_the_side_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _clean_pip(monkeypatch)
    (tmp_path / "team").mkdir()
    (tmp_path / "theirs").mkdir()
    with Index(tmp_path / "team") as team, Index(tmp_path / "theirs") as theirs:
        monkeypatch.setenv(HOSTS_VAR, f"127.0.0.1:{team.port}")
        code, out, err = cli(
            "ab", "--baseline", "current", "--candidate", "torch==2.14.1",
            "--candidate-index-url", team.url("__token__:${INDEX_TOKEN}"),
            "--candidate-extra-index-url", theirs.url(),
            "--workload", "sdpa", "--out", str(tmp_path / "out"),
        )  # fmt: skip
    assert code == 2, out + err
    assert f"host 127.0.0.1:{theirs.port} is not among the approved index hosts" in err, err
    assert "not installed at all" in err
    assert theirs.requests == [] and team.requests == []  # refused before pip started
    assert SECRET not in out + err
    assert not (tmp_path / "out" / "candidate" / "run.json").exists()


def test_a_candidate_takes_wheels_only_so_no_build_code_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _clean_pip(monkeypatch)
    marker = tmp_path / "built-with"
    folder = tmp_path / "team"
    folder.mkdir()
    _sdist(folder, marker)
    with Index(folder) as team:
        url = team.url()
        monkeypatch.setenv(HOSTS_VAR, f"127.0.0.1:{team.port}")
        code, out, err = cli(
            "ab", "--baseline", "current", "--candidate", "torch==99.0",
            "--candidate-index-url", url, "--workload", "sdpa", "--out", str(tmp_path / "out"),
        )  # fmt: skip
        assert team.served("torch"), team.requests  # pip looked for it there ...
        assert code == 3, out + err
        assert "could not prepare an environment for 'torch==99.0'" in err, err
        assert not marker.exists(), marker.read_text()  # ... and never built what it found
        # The control: the same index and pip, without wheels-only, runs the planted backend.
        env = {**os.environ, "PIP_INDEX_URL": url}
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--no-cache-dir",
             "--disable-pip-version-check", "-d", str(tmp_path / "dl"), "torch==99.0"],
            env=env, capture_output=True, text=True, timeout=300, check=False,
        )  # fmt: skip
    assert marker.exists(), "the planted build backend did not run without wheels-only"
    assert "PIP_INDEX_URL" in marker.read_text()  # it saw pip's environment, indexes and all
