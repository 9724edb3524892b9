"""Starting a venv's interpreter once packages a pull request named are in it, without running
any of their code: for listing what it holds and for the pip call that holds it to the baseline,
which has an index credential in its environment.

A wheel can put three kinds of code where a plain `python -I -m pip` runs it: a `.pth` file's
`import` lines (site runs them at start-up), a `sitecustomize` or `usercustomize` module, and
files over pip's own (a wheel installs any path under site-packages, `pip/` included). So the
interpreter starts with -I -S and runs pip_boot.py (site with `.pth` files read for their
directory lines only, no customize module); pip itself is a copy of the suite's own pip, first
on sys.path, and never asks a keyring (which it would import from the venv, or run from its
bin/). The images do the
same with a copy of their venv's pip taken before torch is installed (images/*/Dockerfile).
"""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

from suite.core.errors import EnvironmentProblem

BOOT = Path(__file__).with_name("pip_boot.py")


def guarded(python: str | Path, script: str) -> list[str]:
    """The argv that runs SCRIPT in the interpreter with no code from its site-packages (the
    arguments given after it reach the script as sys.argv[1:])."""
    return [str(python), "-I", "-S", str(BOOT), "-c", script]


def own_pip(folder: Path) -> Path:
    """A copy of the suite's own pip under FOLDER: the folder pip_install takes."""
    spec = importlib.util.find_spec("pip")
    if spec is None or not spec.submodule_search_locations:
        raise EnvironmentProblem("the suite's interpreter has no pip to build venvs with")
    home = folder / "own-pip"
    shutil.copytree(
        next(iter(spec.submodule_search_locations)),
        home / "pip",
        ignore=shutil.ignore_patterns("__pycache__"),
        dirs_exist_ok=True,
    )
    return home


def pip_install(python: str | Path, home: Path) -> list[str]:
    """`pip install` in the venv of PYTHON, run by the copy of pip at HOME (own_pip)."""
    return [str(python), "-I", "-S", str(BOOT), str(home), "install"]
