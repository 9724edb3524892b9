"""Plugins are imported in a bounded child first (suite/worker/plugins.py), before the parent
imports them to expand the matrix: a plugin that exits at import, hangs, or prints without end
ends the command as an error naming it (exit 2), never as a decision without its cells.

The child gets a time limit (IMPORT_TIMEOUT_S) and a cap on what it may write (RLIMIT_FSIZE,
its output included: past the cap the kernel stops it with SIGXFSZ), runs in its own process
group, and answers through a result file; anything else it does is the finding.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import signal
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from suite.core.errors import InputError
from suite.execute.environment import inherited_env, suite_import_root
from suite.workloads import BUILTINS

IMPORT_TIMEOUT_S = 120.0
OUTPUT_CAP_BYTES = 8 << 20
_TAIL = 1500


def user_refs(refs: Sequence[str]) -> list[str]:
    """The references that name user code: everything but the built-ins."""
    return list(dict.fromkeys(r for r in refs if r not in BUILTINS))


# The child's start: the suite from its own folder first, the current directory (where a
# `module:object` plugin may live) last. `python -m suite.worker.plugins` put the current
# directory first: in a checkout holding a `suite/` folder, that folder's code ran instead.
_BOOT = (
    "import sys; src = sys.argv.pop(1); sys.path[:] = [src, *(p for p in sys.path if p), ''];"
    " from suite.worker.plugins import main; sys.exit(main())"
)


def _limits() -> None:
    resource.setrlimit(resource.RLIMIT_FSIZE, (OUTPUT_CAP_BYTES, OUTPUT_CAP_BYTES))


def check_plugins(
    refs: Sequence[str],
    *,
    interpreter: str = sys.executable,
    timeout_s: float = IMPORT_TIMEOUT_S,
    cwd: Path | None = None,
) -> None:
    """Import every user workload in a bounded child; InputError naming the first whose import
    exited, hung, printed past the cap or took the child down."""
    wanted = user_refs(refs)
    if not wanted:
        return
    env = inherited_env()  # no credential where a plugin's import runs
    src = str(suite_import_root())
    env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH", "")) if p)
    with tempfile.TemporaryDirectory(prefix="torch-matrix-plugins-") as tmp:
        out, log = Path(tmp) / "result.json", Path(tmp) / "output.log"
        argv = [interpreter, "-c", _BOOT, src, "--out", str(out), *wanted]
        with open(log, "wb") as fh:
            proc = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=fh, stderr=subprocess.STDOUT, env=env,
                cwd=cwd, start_new_session=True, preexec_fn=_limits,
            )  # fmt: skip
            try:
                code = proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                _kill(proc)
                raise InputError(
                    f"importing {_named(wanted)} did not finish within {timeout_s:.0f}s: a "
                    "plugin must not run work (or wait) when it is imported",
                    option="--workload",
                ) from None
            finally:
                _kill(proc)
        tail = log.read_bytes()[-_TAIL:].decode("utf-8", "replace").strip()
        # Python ignores SIGXFSZ: past the cap its writes fail (EFBIG) and the log stops there.
        flooded = code == -signal.SIGXFSZ or log.stat().st_size >= OUTPUT_CAP_BYTES
        results = None if flooded else _results(out)
    if results is None:
        what = (
            f"was stopped for writing more than {OUTPUT_CAP_BYTES >> 20} MiB while being imported"
            if flooded
            else f"ended the process while being imported (exit code {code})"
        )
        raise InputError(
            f"{_named(wanted)} {what}; nothing ran" + (f"\n{tail[-300:]}" if tail else ""),
            option="--workload",
        )
    for ref in wanted:
        result = results.get(ref) or {"error": "the check said nothing of it"}
        # A WorkloadError is left to this process's own resolve(), which raises it again, as
        # safely: only what escaped it there (or never answered) is stopped here.
        if not result.get("ok") and result.get("kind") != "workload":
            raise InputError(f"{ref}: {result.get('error')}", option="--workload")


def _named(refs: Sequence[str]) -> str:
    return "the workload " + ", ".join(refs) if len(refs) < 4 else f"{len(refs)} workloads"


def _results(path: Path) -> dict[str, dict[str, object]] | None:
    try:
        loaded = json.loads(path.read_text("utf-8"))
    except (OSError, ValueError):
        return None
    return loaded if isinstance(loaded, dict) else None


def _kill(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
