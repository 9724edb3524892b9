"""Counting cells in instructions: each counting process is the cell's worker under Valgrind's
callgrind, collection off until the worker's counted steps (suite/worker/counting.py), on one
thread, with a fixed hash seed. It writes a result record under RUN/counts/ with what callgrind
counted and the per-function totals (callgrind_annotate), which the instructions gate judges
(suite/judge/instructions.py).

Where this process can open the CPU's own instruction counter (suite/worker/hw_counter.py), the
counting processes fork from a plain fork server and read it instead, at native speed
(counting_method); the record then names the method and has no per-function totals.

Counting applies to CPU cells of one rank: a GPU's work is not the host's instructions. A
compiled cell compiles in its cold call, outside the count; the compile and export workloads,
which compile sweeps of graphs first, are not counted (suite/core/spec.py). Where Valgrind is
missing the counting record says so, and the gate is untested with the install hint, never a
pass.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path

from suite.core.errors import InputError
from suite.core.records import Result
from suite.core.results import COUNTS_DIR, failure_result, read_result, utc_now, write_result
from suite.core.spec import CellSpec
from suite.core.spec import countable as counts_cell
from suite.execute.cell import worker_argv
from suite.execute.forkclient import ForkServer
from suite.execute.kept_counts import KeptCounts
from suite.execute.launch import Launcher, Step, read_tail, run_process
from suite.worker.counting import (
    COUNT_VAR,
    COUNT_WITH_VAR,
    METHODS,
    WARMUP_CALLS,
    late_instrumentation,
)
from suite.worker.hw_counter import available as hardware_counter

COUNT_STEPS = 1
# Per-function totals beside a count: "instructions<TAB>function" lines, largest first.
FUNCTIONS_SUFFIX = ".functions.tsv"
COUNT_TIMEOUT_S = 1800.0
INSTALL_HINT = "install Valgrind (apt-get install valgrind; brew has none for Apple Silicon)"
# Settled before the interpreter starts, the same on both sides: one thread (callgrind serializes
# threads, and a second one's spin-waits would be counted), a fixed hash seed.
COUNT_ENV = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONHASHSEED": "0"}
# With instrumentation started late, `summary:` reads 0 and `totals:` holds the count.
_TOTALS = re.compile(rb"^totals:\s*(\d+)", re.MULTILINE)
_SUMMARY = re.compile(rb"^summary:\s*(\d+)", re.MULTILINE)
_ANNOTATED = re.compile(r"^\s*([\d,]+)\s+(?:\([^)]*\)\s+)?(.+?)\s*$")
# callgrind_annotate writes file:function; the file (a source path, or ??? when unknown) goes,
# and C++'s :: stays.
_SOURCE = re.compile(r"^(?:\?\?\?|[^:\s]*[/.][^:\s]*):(?!:)")


def countable(spec: CellSpec) -> bool:
    """Whether the instructions gate applies: one CPU rank, no compilation."""
    return counts_cell(spec.workload, spec.backend, spec.params_dict, spec.world_size)


def count_file(run_dir: Path, spec: CellSpec, replicate: int) -> Path:
    return run_dir / COUNTS_DIR / f"{spec.cell_id}~c{replicate}.json"


def valgrind() -> str | None:
    return shutil.which("valgrind")


def counting_method(env: Mapping[str, str] | None = None) -> tuple[str, str]:
    """How this machine counts a local side, and why: the CPU's own instruction counter where
    this process can open one (suite/worker/hw_counter.py), else callgrind. COUNT_WITH_VAR in
    the environment picks one; a docker: side always counts under callgrind in its image."""
    env = os.environ if env is None else env
    chosen = env.get(COUNT_WITH_VAR, "").strip()
    if chosen and chosen not in METHODS:
        raise InputError(
            f"{COUNT_WITH_VAR}={chosen!r}: counting is one of {', '.join(METHODS)}",
            option=COUNT_WITH_VAR,
        )
    usable, why = hardware_counter()
    if chosen == "perf" or (not chosen and usable):
        return "perf", "the CPU's instruction counter (perf_event)"
    return "callgrind", f"callgrind ({why})" if not chosen else "callgrind, as asked"


def counting_setup(method: str = "callgrind") -> dict[str, object]:
    """What a count depends on in how it is made, for the key of kept counts."""
    found = valgrind()
    version = ""
    if found is not None:
        proc = subprocess.run(
            [found, "--version"], capture_output=True, text=True, timeout=60, check=False
        )
        version = proc.stdout.strip()
    return {
        "method": method,
        "valgrind": version,
        "callgrind": CALLGRIND,
        "env": COUNT_ENV,
        "steps": COUNT_STEPS,
        "warmup_calls": WARMUP_CALLS,
    }


# Counting runs at the lowest priority: an instruction count does not depend on the CPU time it
# gets, and what runs beside it (the rollback checks) keeps the core it needs, and its clock.
NICE = ("nice", "-n", "19")
# Children traced: a side's interpreter may be a wrapper script that execs Python; compilers a
# cell starts are not (their instructions are not the step's, and they would take minutes).
CALLGRIND = (
    "valgrind", "--tool=callgrind", "--collect-atstart=no", "--dump-instr=no",
    *(("--instr-atstart=no",) if late_instrumentation() else ()),
    "--trace-children=yes",
    "--trace-children-skip=*/cc,*/gcc*,*/g++*,*/c++,*/cc1,*/cc1plus,*/as,*/ld,*/collect2,*/ld.*",
)  # fmt: skip


class Counter:
    """The counting processes of one side. A local side's are forked from a fork server that
    runs under callgrind (collection off), so `import torch` under Valgrind is paid once a side,
    not once a count; each forked worker counts its own steps into callgrind.out.<its pid>, and
    starts from the same server state, so a count does not depend on which cells ran before.
    A docker: side's run as one container each, Valgrind inside the image."""

    def __init__(
        self,
        run_dir: Path,
        interpreter: str,
        env: dict[str, str],
        launcher: Launcher = run_process,
        *,
        in_container: bool = False,
        kept: KeptCounts | None = None,
        lane: int = 0,
        method: str = "callgrind",
    ) -> None:
        self.run_dir = run_dir
        self.kept = kept
        self.lane = lane  # a side may count on more than one lane (suite/flows/counts.py)
        self.method = "callgrind" if in_container else method
        self.interpreter = interpreter
        self.env = {**env, **COUNT_ENV, COUNT_VAR: str(COUNT_STEPS), COUNT_WITH_VAR: self.method}
        self.launcher = launcher
        self.in_container = in_container
        self.profiles = run_dir / COUNTS_DIR / (".callgrind" + (f"-{lane}" if lane else ""))
        self._server: ForkServer | None = None

    def _fork_server(self) -> ForkServer:
        if self._server is None:
            self.profiles.mkdir(parents=True, exist_ok=True)
            log = "counting-forkserver" + (f"-{self.lane}" if self.lane else "") + ".log"
            self._server = ForkServer(
                self.interpreter,
                self.env,
                self.run_dir / "logs" / log,
                ready_timeout_s=COUNT_TIMEOUT_S,
                prefix=(
                    *NICE,
                    *CALLGRIND,
                    f"--callgrind-out-file={self.profiles}/callgrind.out.%p",
                )
                if self.method == "callgrind"
                else NICE,
            )
        return self._server

    def inductor_cache(self, spec: CellSpec) -> Path:
        """The inductor cache of one cell on this side, shared by its counting processes: the
        first compiles a compiled cell under Valgrind (~30 s), the next loads the same graph
        (~14 s), and their counts of the step agree within 0.1%. Not shared between cells, so
        that a cell's count does not depend on which cells ran before it."""
        return self.run_dir / COUNTS_DIR / ".inductor-cache" / spec.cell_id

    def close(self, compiled: bool = True) -> None:
        """Stop the fork server; with `compiled`, drop the side's compiled graphs too (a side
        counting on several lanes drops them once all are done)."""
        if self._server is not None:
            self._server.close()
            self._server = None
        shutil.rmtree(self.profiles, ignore_errors=True)
        if compiled:
            shutil.rmtree(self.run_dir / COUNTS_DIR / ".inductor-cache", ignore_errors=True)

    def count(self, spec: CellSpec, run_id: str, replicate: int) -> Result:
        """One counting process of the cell; its record, written under RUN/counts/."""
        began = time.monotonic()
        path = count_file(self.run_dir, spec, replicate)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.unlink(missing_ok=True)
        profile = path.with_suffix(".callgrind")
        log = self.run_dir / "logs" / f"{path.stem}.log"
        started = utc_now()
        if self.method == "callgrind" and not self.in_container and valgrind() is None:
            message = f"Valgrind is not here: {INSTALL_HINT}"
            return _failed(spec, run_id, replicate, path, started, message)
        argv = worker_argv(self.interpreter, spec, path, run_id, replicate)
        env = {**self.env, "TORCHINDUCTOR_CACHE_DIR": str(self.inductor_cache(spec))}
        if self.in_container:
            argv = [*NICE, *CALLGRIND, f"--callgrind-out-file={profile}", *argv]
            outcome = self.launcher(Step(argv, log, COUNT_TIMEOUT_S, env=env))
        else:
            outcome = self._fork_server()(Step(argv, log, COUNT_TIMEOUT_S, env=env))
            forked = self.profiles / f"callgrind.out.{outcome.pid}"
            if outcome.pid is not None and forked.is_file():
                forked.replace(profile)
        if outcome.timed_out or not path.is_file():
            why = "ran past its time limit" if outcome.timed_out else "wrote no record"
            message = f"the counting process {why}: {read_tail(log, 800)}"
            return _failed(spec, run_id, replicate, path, started, message)
        doc = read_result(path)
        if doc.get("status") == "ok" and doc.get("instructions") and self.method == "callgrind":
            _add_counts(doc, profile, self.run_dir)
        # What the count cost the A/B, charged to its budget: the fork server's start under
        # Valgrind for a side's first count, and the per-function totals, included.
        harness = doc.get("harness") or {}
        doc["harness"] = {**harness, "parent_wall_s": round(time.monotonic() - began, 3)}
        write_result(path, doc)
        if self.kept is not None:
            self.kept.keep(spec, replicate, path, doc)
        return doc


def _add_counts(doc: Result, profile: Path, run_dir: Path) -> None:
    counted = doc.get("instructions")
    assert counted is not None
    try:
        raw = profile.read_bytes()
    except OSError:
        counted.update(total=None, per_step=None, profile=None, functions=None)
        return
    found = _TOTALS.search(raw) or _SUMMARY.search(raw)
    total = int(found[1]) if found else None
    functions = per_function(profile)
    listing = profile.with_suffix(FUNCTIONS_SUFFIX)
    listing.write_text(
        "".join(f"{total}\t{name}\n" for name, total in functions.items()), encoding="utf-8"
    )
    counted.update(
        total=total,
        per_step=total / counted["steps"] if total else None,
        profile=str(profile.relative_to(run_dir)),
        functions=str(listing.relative_to(run_dir)),
    )


def per_function(profile: Path, limit: int = 400) -> dict[str, int]:
    """Instructions per function (self cost, demangled) as callgrind_annotate totals them; the
    largest `limit` of them."""
    annotate = shutil.which("callgrind_annotate")
    if annotate is None:
        return {}
    proc = subprocess.run(
        [annotate, "--inclusive=no", "--threshold=100", str(profile)],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    totals: dict[str, int] = {}
    listing = proc.stdout.split("file:function", 1)[-1]
    for line in listing.splitlines():
        found = _ANNOTATED.match(line)
        if not found or "PROGRAM TOTALS" in line:
            continue
        name = re.sub(r"\s+\[[^\]]*\]$", "", found[2])  # drop the object file
        name = _SOURCE.sub("", name, count=1)
        totals[name] = totals.get(name, 0) + int(found[1].replace(",", ""))
        if len(totals) >= limit:
            break
    return totals


def _failed(
    spec: CellSpec, run_id: str, replicate: int, path: Path, started: str, message: str
) -> Result:
    doc = failure_result(
        spec, run_id, replicate, status="skipped" if "Valgrind" in message else "failed",
        mode="unavailable" if "Valgrind" in message else "exception",
        message=message, started_at=started, wall_s=0.0,
    )  # fmt: skip
    write_result(path, doc)
    return doc
