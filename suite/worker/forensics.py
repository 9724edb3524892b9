"""What a rank leaves behind before its cell's timeout stops it: every thread's Python stack,
and whether its main thread waits inside a collective (torch.distributed) or never reached one.

A watchdog thread wakes STACKS_LEAD_S before the deadline the parent set ($TORCH_MATRIX_DEADLINE)
and says the stacks on the rank's output as a marked line (suite/core/wire.py), which every
launcher carries back. A rank that finishes first says nothing. The parent folds what the ranks
said into the record's `hang` (suite/execute/forensics.py). faulthandler also answers SIGUSR1
with every thread's C-level-safe traceback on stderr, for an operator at the machine.
"""

from __future__ import annotations

import contextlib
import faulthandler
import os
import signal
import sys
import sysconfig
import threading
import time
import traceback
from typing import Any

from suite.core.wire import DEADLINE_VAR, STACKS_MARK, say

STACKS_LEAD_S = 5.0
STACKS_LIMIT = 12_000  # characters of stacks kept per rank
_DISTRIBUTED = f"torch{os.sep}distributed{os.sep}"
_STDLIB = sysconfig.get_paths()["stdlib"] + os.sep


def _library(filename: str) -> bool:
    """A frame of torch or of Python's own library: not the line of the workload."""
    return f"{os.sep}torch{os.sep}" in filename or filename.startswith(_STDLIB)


def stacks_now() -> dict[str, Any]:
    """Every other thread's stack, and where the main thread is: inside torch.distributed (a
    collective it waits in) or not (it never reached one); `top` is its innermost frame outside
    torch and Python's library, the line of the workload that the rank was at."""
    frames = sys._current_frames()
    names = {t.ident: t.name for t in threading.enumerate()}
    me, main = threading.get_ident(), threading.main_thread().ident
    texts = []
    for ident, frame in frames.items():
        if ident == me:
            continue
        label = names.get(ident, f"thread {ident}")
        texts.append(f"Thread {label}{' (main)' if ident == main else ''}:\n" +
                     "".join(traceback.format_stack(frame)))  # fmt: skip
    main_stack = traceback.extract_stack(frames[main]) if main in frames else []
    waiting = any(_DISTRIBUTED in f.filename for f in main_stack)
    own = [f for f in main_stack if not _library(f.filename)]
    top = own[-1] if own else (main_stack[-1] if main_stack else None)
    return {
        "in_collective": waiting,
        "top": f"{top.filename}:{top.lineno} in {top.name}: {(top.line or '').strip()}"
        if top is not None
        else None,
        "stacks": "\n".join(texts)[-STACKS_LIMIT:],
    }


def start_watchdog(run_id: str, rank: int, node: int | None) -> None:
    """Say this rank's stacks shortly before the deadline, if it is still running then."""
    with contextlib.suppress(AttributeError, RuntimeError, ValueError):  # extra: none on Windows
        faulthandler.register(signal.SIGUSR1, all_threads=True, chain=False)
    try:
        deadline = float(os.environ.get(DEADLINE_VAR, ""))
    except ValueError:
        return
    left = deadline - time.time()
    wait = left - STACKS_LEAD_S if left > 2 * STACKS_LEAD_S else left / 2

    def watch() -> None:
        if wait > 0:
            threading.Event().wait(wait)
        sys.stdout.flush()
        say(STACKS_MARK, {"run_id": run_id, "rank": rank, "node": node, **stacks_now()})

    threading.Thread(target=watch, name="torch-matrix-watchdog", daemon=True).start()
