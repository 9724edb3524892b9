"""Download the wheels bench/gpu/run.py installs on the GPU machine: requirements.txt and
their dependencies, built for that machine's Python (CPython 3.12, Linux x86-64).

    python bench/gpu/fetch_wheels.py [DIR]     # default: bench/gpu/wheels (git-ignored)

Then pass DIR to the device call among the paths it carries, and to run.py as --wheels.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
PYTHON = "3.12"
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64")


def fetch(folder: Path) -> int:
    folder.mkdir(parents=True, exist_ok=True)
    argv = [
        sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check",
        "--only-binary=:all:", "--python-version", PYTHON, "--implementation", "cp",
        "--abi", f"cp{PYTHON.replace('.', '')}",
        *(arg for p in PLATFORMS for arg in ("--platform", p)),
        "-r", str(HERE / "requirements.txt"), "-d", str(folder),
    ]  # fmt: skip
    return subprocess.run(argv, check=False).returncode


if __name__ == "__main__":
    sys.exit(fetch(Path(sys.argv[1]) if len(sys.argv) > 1 else HERE / "wheels"))
