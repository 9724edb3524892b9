"""The environment every worker gets: this very suite on its import path, from any interpreter,
and the suite's own commit in the run record."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from suite.execute.environment import RunOptions, suite_commit, suite_import_root, worker_env
from tests.helpers import REPO


def test_the_import_root_holds_the_whole_suite_package() -> None:
    link = suite_import_root() / "suite"
    assert link.resolve() == (REPO / "suite").resolve()
    assert {"worker", "execute", "core", "workloads"} <= {p.name for p in link.iterdir()}


def test_an_interpreter_without_the_suite_finds_every_entry_point_on_the_workers_path(
    tmp_path: Path,
) -> None:
    env = worker_env(RunOptions(out=tmp_path))
    # -I would drop PYTHONPATH too; -S drops site-packages (where the suite is installed), so
    # only the worker's PYTHONPATH can provide it.
    code = (
        "import importlib.util as u;"
        "print(all(u.find_spec(m) for m in "
        "('suite.worker.__main__', 'suite.worker.rollback', 'suite.execute.forkserver')))"
    )
    found = subprocess.run(
        [sys.executable, "-S", "-c", code], env=env, cwd=tmp_path, capture_output=True,
        text=True, timeout=60, check=False,
    )  # fmt: skip
    assert found.stdout.strip() == "True", found.stderr


def test_the_run_record_names_the_checkout_commit() -> None:
    commit, dirty = suite_commit()
    head = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True,
        check=True, env={**os.environ, "GIT_DIR": str(REPO / ".git")},
    ).stdout.strip()  # fmt: skip
    assert commit == head and isinstance(dirty, bool)
