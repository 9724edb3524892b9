"""Start a venv's interpreter with none of the code its packages carry, for pip or a question.

Run as `python -I -S pip_boot.py PIP_HOME install …` (pip from the copy at PIP_HOME, taken
before any package a pull request named was installed) or `python -I -S pip_boot.py -c SCRIPT
ARG…` (a question to the venv, suite/execute/side_deps.py). Either way site runs as usual (the
venv's prefix and site-packages) except that a `.pth` file is read for its directory lines only
(an `import` line is skipped, not run) and no sitecustomize or usercustomize module is
imported; pip never asks a keyring. Standard library only: the images run it from the mounted source
(images/*/Dockerfile), the venvs from the suite's own install (suite/execute/guarded.py).
"""

import os
import runpy
import site
import sys


def _directories(sitedir: str, name: str, known_paths: set[str]) -> set[str]:
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


def _quiet() -> None:
    return None


def main() -> None:
    site.addpackage = _directories  # type: ignore[assignment]
    site.execsitecustomize = site.execusercustomize = _quiet
    site.main()
    if sys.argv[1] == "-c":  # a question: the script, then its arguments
        script = sys.argv[2]
        sys.argv = ["-c", *sys.argv[3:]]
        exec(compile(script, "<question>", "exec"), {"__name__": "__main__"})
        return
    sys.path.insert(0, sys.argv.pop(1))  # PIP_HOME: the folder that holds pip/
    # pip never asks a keyring: it would import the keyring package from the venv (pip before
    # 23.1 at start-up) or run a `keyring` program found on PATH (the venv's bin/ first).
    sys.modules["keyring"] = None  # type: ignore[assignment]
    os.environ["PIP_KEYRING_PROVIDER"] = "disabled"  # pip 23.1 on; older pips ignore it
    sys.argv[0] = "pip"
    runpy.run_module("pip", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
