"""Do process-level noise controls narrow the process-to-process spread of a plain step's p50?

Each setting starts N fresh processes of bench/plain_step.py (the workload's step in a bare
perf_counter loop: warmup, then the timed loop, one p50 per process) under one control:

  plain            nothing beyond what every setting gets
  aslr-off         address-space randomization off for the worker (personality
                   ADDR_NO_RANDOMIZE, as `setarch "$(uname -m)" -R` sets it)
  pinned           the worker on one CPU (sched_setaffinity)
  aslr-off+pinned  both
  thp-always       plain, with transparent huge pages set to `always` machine-wide
  thp-never        plain, with transparent huge pages set to `never` machine-wide

Every worker gets OMP_NUM_THREADS=1, torch.set_num_threads(1) and PYTHONHASHSEED=0, so hash
randomization is off in all settings alike. Processes run round-robin (process 1 of every
setting, then process 2, ...) so that a slow drift of the machine does not land on one setting.
Each worker reports what it saw (personality, stack address, CPUs, threads, hash seed) and the
table says whether each control took effect. The THP rows need a writable
/sys/kernel/mm/transparent_hugepage/enabled (root); the original mode is restored afterwards.

    python bench/noise_controls.py [--processes 8] [--workload CELL_ID ...]
        [--settings NAME ...] [--seconds 1.0] [--cpu N] [--json PATH]

Run it alone: anything beside it is background load, and the spreads measure that instead.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import importlib.util
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from tabulate import tabulate

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
if importlib.util.find_spec("suite") is None:  # a checkout without `pip install -e .`
    sys.path.append(str(ROOT))

from harness import _cv as sd_ln  # noqa: E402  (the one definition of the spread)

from suite.core.host import cpu_model  # noqa: E402
from suite.workloads.matrix import expand, load_matrix, select  # noqa: E402

PLAIN_STEP = HERE / "plain_step.py"
DEFAULT_WORKLOADS = ("sdpa.causal.fp32.fwd.s256@cpu", "mlp_train.eager.fp32.b64h256@cpu")
# What every worker gets beyond this process's environment, in every setting.
CHILD_ENV = {"OMP_NUM_THREADS": "1", "PYTHONHASHSEED": "0"}
ADDR_NO_RANDOMIZE = 0x0040000
_QUERY_PERSONALITY = 0xFFFFFFFF
THP_PATH = Path("/sys/kernel/mm/transparent_hugepage/enabled")
RESULT_KIND = "torch-matrix/noise-controls"
RESULT_VERSION = 1
# A 1-minute load average this far above what the run adds itself means other work was running.
BUSY_LOAD = 0.5

# The worker: report what the process sees, then run plain_step.py as its own __main__.
# argv: plain_step.py SPEC_JSON --seconds S. It reads /proc only, so that nothing it does
# (an allocation, say) changes the allocator state the step then runs in.
WORKER = """\
import json, os, runpy, sys
import torch
torch.set_num_threads(1)
with open("/proc/self/personality") as fh:
    personality = int(fh.read(), 16)
with open("/proc/self/maps") as fh:
    stack = next((ln.split("-")[0] for ln in fh if ln.rstrip().endswith("[stack]")), None)
print(json.dumps({"probe": {
    "personality": personality, "stack": stack, "cpus": sorted(os.sched_getaffinity(0)),
    "threads": torch.get_num_threads(), "hash_seed": os.environ.get("PYTHONHASHSEED"),
    "torch": torch.__version__}}), flush=True)
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


@dataclass(frozen=True)
class Setting:
    name: str
    aslr_off: bool = False
    pinned: bool = False
    thp: str | None = None  # the machine-wide THP mode while its workers run; None: as found


SETTINGS = (
    Setting("plain"),
    Setting("aslr-off", aslr_off=True),
    Setting("pinned", pinned=True),
    Setting("aslr-off+pinned", aslr_off=True, pinned=True),
    Setting("thp-always", thp="always"),
    Setting("thp-never", thp="never"),
)
BY_NAME = {s.name: s for s in SETTINGS}


@dataclass(frozen=True)
class ProcessResult:
    """One worker's raw figures and what it saw of the controls."""

    workload: str
    setting: str
    process: int
    p50_s: float
    samples: int
    wall_s: float
    personality: int
    stack: str | None
    cpus: tuple[int, ...]
    threads: int
    hash_seed: str | None
    torch: str
    thp: str | None  # the THP mode read back just before the worker started


class ChildFailed(Exception):
    pass


class Thp:
    """Switches /sys/kernel/mm/transparent_hugepage/enabled and puts the original back."""

    def __init__(self, path: Path = THP_PATH) -> None:
        self.path = path
        self.original: str | None = None

    def mode(self) -> str:
        match = re.search(r"\[(\w+)\]", self.path.read_text())
        if match is None:
            raise OSError(f"cannot read the mode from {self.path}: {self.path.read_text()!r}")
        return match.group(1)

    def unavailable(self) -> str | None:
        """Why the THP rows cannot run, or None; writing the mode it has is the only sure test."""
        try:
            self.original = self.mode()
            self.path.write_text(self.original)
        except OSError as exc:
            self.original = None
            return f"cannot switch {self.path} here ({exc})"
        return None

    def set(self, mode: str) -> str:
        if self.mode() != mode:
            self.path.write_text(mode)
        return self.mode()

    def restore(self) -> None:
        if self.original is not None and self.mode() != self.original:
            self.path.write_text(self.original)


def _libc_personality() -> Callable[[int], int]:
    libc = ctypes.CDLL(None, use_errno=True)
    fn: Callable[[int], int] = libc.personality
    return fn


def _preexec(setting: Setting, cpu: int) -> Callable[[], None] | None:
    """Runs in the forked child before exec: the personality flag survives exec, as under
    setarch -R. A failure here surfaces in the worker's own probe, not as an exception."""
    if not (setting.aslr_off or setting.pinned):
        return None
    personality = _libc_personality()  # loaded in the parent: no dlopen after fork

    def apply() -> None:
        if setting.aslr_off:
            personality(personality(_QUERY_PERSONALITY) | ADDR_NO_RANDOMIZE)
        if setting.pinned:
            os.sched_setaffinity(0, {cpu})

    return apply


def aslr_unavailable() -> str | None:
    """Why ASLR cannot be turned off for a worker here (a seccomp filter, no /proc), or None."""
    argv = [sys.executable, "-c", "print(open('/proc/self/personality').read())"]
    try:
        out = subprocess.run(
            argv,
            preexec_fn=_preexec(BY_NAME["aslr-off"], 0),
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        ).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        return f"the probe child failed ({exc})"
    if not int(out.strip(), 16) & ADDR_NO_RANDOMIZE:
        return f"personality(ADDR_NO_RANDOMIZE) did not take (the child reads {out.strip()})"
    return None


def run_worker(
    workload: str, spec_json: str, setting: Setting, process: int, seconds: float, cpu: int,
    thp: str | None,
) -> ProcessResult:  # fmt: skip
    argv = [sys.executable, "-c", WORKER, str(PLAIN_STEP), spec_json, "--seconds", str(seconds)]
    where = f"{workload}, setting {setting.name}, process {process}"
    start = time.perf_counter()
    try:
        done = subprocess.run(
            argv,
            cwd=ROOT,  # `suite` is imported from this checkout, as plain_step.py expects
            env={**os.environ, **CHILD_ENV},
            preexec_fn=_preexec(setting, cpu),
            capture_output=True,
            text=True,
            check=False,
            timeout=seconds + 600,
        )
    except subprocess.TimeoutExpired as exc:
        raise ChildFailed(f"{where}: timed out after {exc.timeout:.0f} s") from exc
    wall = time.perf_counter() - start
    lines = done.stdout.strip().splitlines()
    try:
        if done.returncode != 0:
            raise ValueError(f"exit status {done.returncode}")
        probe = next(json.loads(ln)["probe"] for ln in lines if ln.startswith('{"probe"'))
        timed = json.loads(lines[-1])
        return ProcessResult(
            workload=workload,
            setting=setting.name,
            process=process,
            p50_s=float(timed["p50_s"]),
            samples=int(timed["samples"]),
            wall_s=wall,
            personality=int(probe["personality"]),
            stack=probe["stack"],
            cpus=tuple(probe["cpus"]),
            threads=int(probe["threads"]),
            hash_seed=probe["hash_seed"],
            torch=str(probe["torch"]),
            thp=thp,
        )
    except (ValueError, KeyError, IndexError, StopIteration) as exc:
        raise ChildFailed(
            f"{where}: {exc}\nstdout tail:\n{done.stdout[-1500:]}\nstderr tail:\n"
            f"{done.stderr[-3000:]}"
        ) from exc


def round_robin(
    processes: int, workloads: Collection[str], settings: Sequence[Setting]
) -> Iterator[tuple[int, str, Setting]]:
    """Process i of every workload and setting before process i+1; the setting order rotates
    each round, so no setting always follows the same neighbour (or a THP switch)."""
    for i in range(processes if settings else 0):
        shift = i % len(settings)
        for workload in workloads:
            for setting in [*settings[shift:], *settings[:shift]]:
                yield i + 1, workload, setting


@contextlib.contextmanager
def _terminate_as_exit() -> Iterator[None]:
    """SIGTERM unwinds like Ctrl-C, so the finally that restores THP runs."""
    previous = signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def measure(
    specs: dict[str, str], settings: Sequence[Setting], processes: int, seconds: float, cpu: int,
    thp: Thp | None, results: list[ProcessResult],
) -> None:  # fmt: skip
    """Appends to results as workers finish, so a failure still leaves what was measured."""
    total = processes * len(specs) * len(settings)
    with _terminate_as_exit():
        try:
            for n, (i, workload, setting) in enumerate(round_robin(processes, specs, settings)):
                mode = None
                if thp is not None and thp.original is not None:
                    mode = thp.set(setting.thp or thp.original)
                print(f"[{n + 1}/{total}] {workload} {setting.name} #{i}", file=sys.stderr)
                results.append(
                    run_worker(workload, specs[workload], setting, i, seconds, cpu, mode)
                )
        finally:
            if thp is not None:
                thp.restore()


def checked(setting: Setting, runs: Sequence[ProcessResult], cpu: int) -> str:
    """What the workers themselves saw of the setting's controls."""
    notes = []
    aslr = [bool(r.personality & ADDR_NO_RANDOMIZE) for r in runs]
    stacks = len({r.stack for r in runs})
    if setting.aslr_off:
        if not all(aslr):
            notes.append(f"ASLR off NOT applied in {aslr.count(False)}/{len(runs)}")
        elif stacks == 1:
            notes.append("ASLR off (one stack address)")
        else:
            notes.append(f"ASLR flag set, but {stacks} stack addresses")
    else:
        notes.append(f"ASLR on ({stacks} stack addresses)")
    if setting.pinned:
        pinned = sum(r.cpus == (cpu,) for r in runs)
        notes.append(
            f"pinned to CPU {cpu}"
            if pinned == len(runs)
            else f"pinning NOT applied in {len(runs) - pinned}/{len(runs)}"
        )
    if setting.thp is not None:
        wrong = sum(r.thp != setting.thp for r in runs)
        notes.append(f"THP {setting.thp}" if not wrong else f"THP NOT {setting.thp} in {wrong}")
    if any(r.threads != 1 or r.hash_seed != "0" for r in runs):
        notes.append("NOT all 1 thread / hash seed 0")
    return ", ".join(notes)


def table(
    workload: str, settings: Sequence[Setting], results: Sequence[ProcessResult], cpu: int
) -> str:
    rows = []
    for setting in settings:
        runs = [r for r in results if r.workload == workload and r.setting == setting.name]
        p50s = [r.p50_s for r in runs]
        median = statistics.median(p50s)
        rows.append(
            [
                setting.name,
                len(runs),
                f"{median * 1e3:.4f}",
                f"{sd_ln(p50s) * 100:.2f}" if len(p50s) > 1 else "n/a",
                f"{(max(p50s) - min(p50s)) / median * 100:.2f}",
                checked(setting, runs, cpu),
            ]
        )
    headers = [
        "setting",
        "processes",
        "median p50 (ms)",
        "sd of ln p50 (%)",
        "(max-min)/median (%)",
        "checked in the workers",
    ]
    return tabulate(rows, headers=headers)


def write_json(path: Path, meta: dict[str, Any], results: Sequence[ProcessResult]) -> None:
    doc = {
        "kind": RESULT_KIND,
        "version": RESULT_VERSION,
        **meta,
        "workers": [asdict(r) for r in results],
    }
    path.write_text(json.dumps(doc, indent=2) + "\n")


def _cpu_specs() -> dict[str, str]:
    """Cell id -> spec JSON for every CPU cell of the built-in matrix."""
    cells, _ = expand(select(load_matrix(None), [], ["cpu"], None))
    return {c.cell_id: c.to_json() for c in cells}


def _load(values: Sequence[float], own: float) -> str:
    """The load averages, and whether they say that something else was running: `own` is what
    this run adds itself (one worker at a time)."""
    busy = values[0] > own + BUSY_LOAD
    verdict = "something else was running" if busy else "nothing else of note running"
    return f"{', '.join(f'{x:.2f}' for x in values)} ({verdict})"


def _read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError as exc:
        return f"unreadable ({exc.strerror})"


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--processes", type=int, default=8, help="fresh processes per setting")
    parser.add_argument(
        "--workload", action="append", metavar="CELL_ID",
        help="a CPU cell of the built-in matrix, repeatable; default: "
        + " ".join(DEFAULT_WORKLOADS),
    )  # fmt: skip
    parser.add_argument(
        "--settings", nargs="+", choices=list(BY_NAME), default=list(BY_NAME), metavar="NAME",
        help=f"a subset of: {' '.join(BY_NAME)} (default: all)",
    )  # fmt: skip
    parser.add_argument("--seconds", type=float, default=1.0, help="timed loop per process")
    parser.add_argument(
        "--cpu", type=int, default=max(os.sched_getaffinity(0)), help="the CPU pinned rows use"
    )
    parser.add_argument("--json", type=Path, help="write the raw per-process figures here")
    args = parser.parse_args(argv)
    if args.processes < 2:
        parser.error("--processes must be at least 2 for a spread")
    if args.cpu not in os.sched_getaffinity(0):
        parser.error(f"--cpu {args.cpu} is not one this process may use")
    available = _cpu_specs()
    wanted = args.workload or list(DEFAULT_WORKLOADS)
    unknown = [w for w in wanted if w not in available]
    if unknown:
        parser.error(f"unknown cell {', '.join(unknown)}; choose from: {', '.join(available)}")
    args.specs = {w: available[w] for w in dict.fromkeys(wanted)}
    args.settings = [BY_NAME[n] for n in dict.fromkeys(args.settings)]
    return args


def applicable(settings: Sequence[Setting]) -> tuple[list[Setting], dict[str, str], Thp | None]:
    """The settings whose controls can be applied here, why the others cannot, and the THP
    switch when THP rows will run."""
    skipped: dict[str, str] = {}
    if any(s.aslr_off for s in settings) and (why := aslr_unavailable()):
        skipped.update({s.name: why for s in settings if s.aslr_off})
    thp = Thp() if any(s.thp for s in settings) else None
    if thp is not None and (why := thp.unavailable()):
        skipped.update({s.name: why for s in settings if s.thp})
        thp = None
    return [s for s in settings if s.name not in skipped], skipped, thp


def main(argv: Sequence[str] | None = None) -> None:
    args = _parse(argv)
    settings, skipped, thp = applicable(args.settings)
    meta: dict[str, Any] = {
        "cpu_model": cpu_model(),
        "cpus": sorted(os.sched_getaffinity(0)),
        "pinned_cpu": args.cpu,
        "randomize_va_space": _read(Path("/proc/sys/kernel/randomize_va_space")),
        "thp_enabled": _read(THP_PATH),
        "child_env": CHILD_ENV,
        "processes_per_setting": args.processes,
        "seconds": args.seconds,
        "not_measured": skipped,
        "load_before": os.getloadavg(),
    }
    print(f"CPU: {meta['cpu_model']} (CPUs {meta['cpus']}; pinned rows use CPU {args.cpu})")
    print(f"kernel.randomize_va_space = {meta['randomize_va_space']}; THP: {meta['thp_enabled']}")
    print(
        "every worker: OMP_NUM_THREADS=1, torch.set_num_threads(1), PYTHONHASHSEED=0 "
        "(hash randomization off in all settings)"
    )
    print(f"load average (1, 5, 15 min) before: {_load(meta['load_before'], 0.0)}")
    for name, why in skipped.items():
        print(f"NOT measured: {name}: {why}")

    results: list[ProcessResult] = []
    start = time.perf_counter()
    failure: str | None = None
    try:
        measure(args.specs, settings, args.processes, args.seconds, args.cpu, thp, results)
    except ChildFailed as exc:
        failure = str(exc)
    meta.update(
        wall_s=time.perf_counter() - start,
        load_after=os.getloadavg(),
        torch=sorted({r.torch for r in results}),
        failure=failure,
    )
    if args.json:
        write_json(args.json, meta, results)
    if failure:
        sys.exit(f"error: a worker failed, so there is no table: {failure}")
    for workload in args.specs:
        print(f"\n{workload} ({args.processes} processes per setting, {args.seconds} s each)")
        print(table(workload, settings, results, args.cpu) if settings else "(no settings run)")
    print(f"\ntorch {', '.join(meta['torch']) or '(no worker ran)'}")
    print(f"total wall time {meta['wall_s']:.1f} s")
    print(f"load average (1, 5, 15 min) after: {_load(meta['load_after'], 1.0)}")
    if thp is not None:
        print(f"THP restored: {_read(THP_PATH)}")
    for name, why in skipped.items():
        print(f"NOT measured: {name}: {why}")


if __name__ == "__main__":
    main()
