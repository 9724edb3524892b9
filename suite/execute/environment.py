"""How a run's workers are started: the options a run takes, the environment every worker gets
(this very suite on its import path, no credential), the probe of that environment, and the
suite's own commit."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from suite.core.errors import EnvironmentProblem
from suite.core.index_access import index_secret_names
from suite.core.secrets import for_user_code
from suite.core.validation import validate
from suite.execute.launch import Launcher, ProcessExit, Step, read_tail, run_process
from suite.execute.nodes import NodeLauncher
from suite.execute.progress import Progress

PROBE_TIMEOUT_S = 300.0


# Workers time what users' code would see: the allocator and threads keep torch's defaults
# (the peak-memory pass sets what it needs, after the timed samples).
WORKER_ENV = {"PYTHONUNBUFFERED": "1"}


@dataclass
class RunOptions:
    out: Path
    interpreter: str = sys.executable
    resume: bool = False
    timeout_s: float | None = None
    memory_limit_bytes: int | None = None
    rounds: tuple[int, ...] = (0,)
    command: list[str] = field(default_factory=lambda: list(sys.argv))
    extra_env: dict[str, str] = field(default_factory=dict)
    progress: Progress | None = None
    run_id: str | None = None
    # Starts a worker: the local process launcher, or one that runs it inside a container.
    launcher: Launcher = run_process
    # Places a distributed cell's nodes (suite/execute/nodes.py); None: every node here.
    nodes: NodeLauncher | None = None


def _package() -> Path:
    """The folder of the suite package itself (not of this module, which sits inside it)."""
    import suite

    return Path(suite.__file__).resolve().parent


def suite_commit() -> tuple[str | None, bool | None]:
    here = _package().parent
    try:
        commit = subprocess.run(
            ["git", "-C", str(here), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
        if commit.returncode != 0:
            return None, None
        dirty = subprocess.run(
            ["git", "-C", str(here), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
        return commit.stdout.strip(), bool(dirty.stdout.strip())
    except (OSError, subprocess.TimeoutExpired):
        return None, None


def inherited_env() -> dict[str, str]:
    """What a worker, or a process that imports workload code, inherits of this process's
    environment: everything but credentials (suite/core/secrets.py's rule, the runner's tokens,
    and the index variables and their file, suite/core/index_access.py). User code runs there;
    a credential it cannot see it cannot send anywhere, and no record of it can keep one."""
    return for_user_code(os.environ, also=index_secret_names(os.environ))


# What places a process in a distributed world. A worker started from a shell inside a Slurm
# step or a Kubeflow pod inherits its job's; a single-process cell would then join a world it
# was never part of, and torchrun's --standalone would still read PET_NNODES. Only the launcher
# of a cell's own nodes sets them.
WORLD_VARS = frozenset(
    {
        "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK",
        "GROUP_WORLD_SIZE", "ROLE_RANK", "ROLE_WORLD_SIZE", "ROLE_NAME", "MASTER_ADDR",
        "MASTER_PORT", "NODE_RANK",
    }
)  # fmt: skip
WORLD_PREFIXES = ("PET_", "TORCHELASTIC_")
CLEARED_VAR = "TORCH_MATRIX_CLEARED_WORLD"  # the names removed, for the record to say so


def without_world(env: dict[str, str]) -> tuple[dict[str, str], list[str]]:
    """ENV without what would place a worker in an inherited world, and the names removed."""
    cleared = sorted(k for k in env if k in WORLD_VARS or k.startswith(WORLD_PREFIXES))
    return {k: v for k, v in env.items() if k not in cleared}, cleared


def worker_env(options: RunOptions) -> dict[str, str]:
    """The environment of every worker: the inherited one without any distributed world, plus
    what the harness sets."""
    env, cleared = without_world(inherited_env())
    if cleared:
        env[CLEARED_VAR] = ",".join(cleared)
    env.update(WORKER_ENV)
    env.update(options.extra_env)
    src = str(suite_import_root())
    env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH", "")) if p)
    return env


def suite_import_root() -> Path:
    """A folder holding only this suite, for the worker's PYTHONPATH.

    The worker must import this very suite even from an interpreter (a venv for the other torch
    pin) that lacks it. Putting the suite's parent folder on the path would also expose that
    folder's other packages, the parent interpreter's torch among them when it is site-packages.
    """
    package = _package()
    root = (
        Path(tempfile.gettempdir()) / f"torch-matrix-src-{os.getuid()}-{_short_hash(str(package))}"
    )
    link = root / "suite"
    if not link.is_symlink() or link.resolve() != package:
        root.mkdir(parents=True, exist_ok=True)
        tmp = root / f".suite.{os.getpid()}"
        tmp.unlink(missing_ok=True)
        tmp.symlink_to(package, target_is_directory=True)
        os.replace(tmp, link)
    return root


def _short_hash(text: str) -> str:
    import hashlib

    return hashlib.sha256(text.encode()).hexdigest()[:12]


def probe_environment(
    options: RunOptions, log_dir: Path, launcher: Launcher | None = None
) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="torch-matrix-probe-") as tmp:
        out = Path(tmp) / "env.json"
        argv = [options.interpreter, "-m", "suite.worker", "probe", "--out", str(out)]
        step = Step(argv, log_dir / "probe.log", PROBE_TIMEOUT_S, env=worker_env(options))
        outcome = (launcher or options.launcher)(step)
        if outcome.returncode != 0 or not out.is_file():
            raise EnvironmentProblem(
                f"probing {options.interpreter} failed ({_describe(outcome)}); is torch installed "
                f"there? Log: {log_dir / 'probe.log'}\n{read_tail(log_dir / 'probe.log', 1500)}"
            )
        env: dict[str, Any] = json.loads(out.read_text("utf-8"))
    validate(env, "torch-matrix/environment", file=str(log_dir / "probe.log"))
    return env


def _describe(outcome: ProcessExit) -> str:
    if outcome.timed_out:
        return f"timed out after {outcome.wall_s:.0f}s"
    if outcome.signal_name:
        return f"killed by {outcome.signal_name}"
    return f"exit code {outcome.returncode}"


def default_memory_limit() -> int | None:
    from suite.core.host import memory_total_bytes

    total = memory_total_bytes()
    return int(total * 0.9) if total else None
