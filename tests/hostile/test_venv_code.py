"""A pull request's packages, once pip has put them in a candidate's venv, carry code into three
places a plain `python -I -m pip` runs it: a `.pth` file's import line, a `sitecustomize`
module, and files over pip's own (a wheel may install `pip/`). The second pip call of a venv's
build (holding it to the baseline's pins) has the index credential in its environment, and the
venv is asked what it holds before it: neither may run any of that code (suite/execute/guarded.py).

Real venvs and real pip, offline: wheels from a folder. The control shows every plant live under
the plain interpreter, so the guarded runs finding nothing is evidence, not a dead plant.
"""

from __future__ import annotations

import base64
import hashlib
import os
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest

from suite.execute import sides
from suite.execute.guarded import own_pip, pip_install
from suite.execute.pinned import read_installed

SECRET = "venv-code-S3cret-7731"


def _wheel(folder: Path, name: str, files: dict[str, str]) -> Path:
    """NAME-1.0-py3-none-any.whl holding FILES, with the metadata pip needs to install it."""
    info = f"{name}-1.0.dist-info"
    files = {
        **files,
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    for path, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=")
        record.append(f"{path},sha256={digest.decode()},{len(text.encode())}")
    record.append(f"{info}/RECORD,,")
    wheel = folder / f"{name}-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        for path, text in files.items():
            zf.writestr(path, text)
        zf.writestr(f"{info}/RECORD", "\n".join(record) + "\n")
    return wheel


def _planted(marker: Path) -> dict[str, str]:
    said = (
        "import os\n"
        f"with open({str(marker)!r}, 'a') as fh:\n"
        "    fh.write('{where} ' + os.environ.get('INDEX_TOKEN', '-') + '\\n')\n"
    )
    return {
        "planted.pth": "import os; exec(" + repr(said.format(where="pth")) + ")\n",
        "sitecustomize.py": said.format(where="sitecustomize"),
        "pip/__init__.py": said.format(where="venv-pip"),
        "pip/__main__.py": said.format(where="venv-pip-main"),
        "keyring/__init__.py": said.format(where="keyring"),
    }


@pytest.fixture
def planted_venv(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path, Path]:
    """A venv holding the planted wheel, the wheel folder, and the marker the plants write."""
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    for name in ("PIP_FIND_LINKS", "PIP_EXTRA_INDEX_URL", "PIP_INDEX_URL"):
        monkeypatch.delenv(name, raising=False)
    marker = tmp_path / "ran"
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    _wheel(wheels, "planted", _planted(marker))
    _wheel(wheels, "other", {"other.py": "VALUE = 1\n"})
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-I", "-m", "venv", "--without-pip", str(venv)], check=True)
    home = own_pip(tmp_path / "pip")
    python = venv / "bin" / "python"
    argv = [*pip_install(python, home), "--no-index", "--find-links", str(wheels), "-q", "planted"]
    subprocess.run(argv, check=True, capture_output=True)
    assert not marker.exists()  # installing a wheel runs none of its code
    return python, wheels, marker


def test_the_credentialed_pip_call_runs_no_code_the_venv_holds(
    planted_venv: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    python, wheels, marker = planted_venv
    home = own_pip(tmp_path / "pip-again")
    env = {**os.environ, "INDEX_TOKEN": SECRET}
    argv = [*pip_install(python, home), "--no-index", "--find-links", str(wheels), "-q", "other"]
    done = subprocess.run(argv, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert not marker.exists(), marker.read_text()
    site = next((python.parent.parent / "lib").glob("python3*/site-packages"))
    assert (site / "other.py").is_file()  # installed into the venv, not beside it

    # Asked what it holds (before the second call): the planted packages are listed, not run.
    held = read_installed(str(python), "candidate")
    assert {"planted", "other"} <= set(held.dists)
    assert not marker.exists(), marker.read_text()

    # The control: the plain interpreter runs every plant, with the credential in reach.
    plain = subprocess.run(
        [str(python), "-I", "-m", "pip", "--version"], env=env, capture_output=True, text=True
    )
    said = marker.read_text()
    for where in ("pth", "sitecustomize", "venv-pip", "venv-pip-main"):
        assert f"{where} {SECRET}" in said, (where, said, plain.stderr)


def test_a_venvs_build_runs_every_pip_call_guarded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """sides builds a venv with the guarded pip only: both pip calls, the first and the one
    that holds the venv to the baseline."""
    monkeypatch.setenv("TORCH_MATRIX_CACHE", str(tmp_path / "cache"))
    calls: list[list[str]] = []

    def logged(argv: list[str], *_: Any) -> subprocess.CompletedProcess[str]:
        calls.append(argv)
        if "venv" in argv:
            (Path(argv[-1]) / "bin").mkdir(parents=True, exist_ok=True)
            (Path(argv[-1]) / "bin" / "python").write_text("")
        return subprocess.CompletedProcess(argv, 0, "", "")

    monkeypatch.setattr(sides, "_logged", logged)
    sides.venv_for("torch==2.13.0")
    (make, install) = calls
    assert make[1:5] == ["-I", "-m", "venv", "--without-pip"]
    assert install[1:3] == ["-I", "-S"] and install[3].endswith("pip_boot.py")
    assert "--only-binary" in install
