"""Starting a venv's interpreter once packages a pull request named are in it, without running
any of their code: for listing what it holds and for the pip call that holds it to the baseline,
which has an index credential in its environment.

A wheel can put three kinds of code where a plain `python -I -m pip` runs it: a `.pth` file's
`import` lines (site runs them at start-up), a `sitecustomize` or `usercustomize` module, and
files over pip's own (a wheel installs any path under site-packages, `pip/` included). So the
interpreter starts with -I -S, and a short boot runs site with `.pth` files read for their
directory lines only and no customize module; pip itself comes from a copy of the suite's own
pip, first on sys.path, and never asks a keyring (which it would import from the venv).
"""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

from suite.core.errors import EnvironmentProblem

# site as usual (the venv's prefix and site-packages), but a .pth file's lines are directories
# only: an `import` line is skipped, not run; sitecustomize and usercustomize are not imported.
BOOT = """\
import os, site, sys
def _directories(sitedir, name, known_paths):
    try:
        with open(os.path.join(sitedir, name), encoding="utf-8") as fh:
            lines = fh.read().splitlines()
    except (OSError, UnicodeDecodeError):
        return known_paths
    for line in lines:
        line = line.strip()
        if not line or line.startswith("#") or line.split()[0] == "import":
            continue
        folder = os.path.abspath(os.path.join(sitedir, line))
        if folder not in known_paths and os.path.isdir(folder):
            sys.path.append(folder)
            known_paths.add(folder)
    return known_paths
site.addpackage = _directories
site.execsitecustomize = site.execusercustomize = lambda: None
site.main()
"""

# pip from the folder this boot file is in (own_pip's copy), which -I leaves off sys.path.
_PIP_MAIN = """\
import runpy
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.argv[0] = "pip"
runpy.run_module("pip", run_name="__main__", alter_sys=True)
"""
BOOT_FILE = "pip-guarded.py"

# pip never asks a keyring: "auto" imports the keyring package from the venv's site-packages.
NO_KEYRING = ("--keyring-provider", "disabled")


def guarded(python: str | Path, script: str) -> list[str]:
    """The argv that runs SCRIPT in the interpreter with no code from its site-packages."""
    return [str(python), "-I", "-S", "-c", BOOT + script]


def own_pip(folder: Path) -> Path:
    """A copy of the suite's own pip under FOLDER, beside the boot file that runs it: the
    folder pip_install takes."""
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
    (home / BOOT_FILE).write_text(BOOT + _PIP_MAIN, encoding="utf-8")
    return home


def pip_install(python: str | Path, home: Path) -> list[str]:
    """`pip install` in the venv of PYTHON, run by the copy of pip at HOME (own_pip)."""
    return [str(python), "-I", "-S", str(home / BOOT_FILE), "install", *NO_KEYRING]
