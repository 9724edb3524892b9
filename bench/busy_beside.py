"""Run a command with other work beside it, as a shared runner has: N spinning processes keep
N CPUs busy from before the command starts until it ends, then the command's exit is this
script's exit. Prints, at the end, how long the command ran and how much CPU the spinners got.

    python bench/busy_beside.py [--cpus 1] -- bash .ci/run
    python bench/busy_beside.py --cpus 1 -- python -m pytest -q tests/test_ab.py

The spinners are plain Python loops, unpinned: the scheduler places them, as it would a
neighbour's job. They stop with the command, on Ctrl-C and when this script is killed (each
spinner watches this script's pid and leaves when it is gone).
"""

from __future__ import annotations

import argparse
import os
import resource
import signal
import subprocess
import sys
import time

# A spinner polls its parent every few million iterations: cheap, and gone within a second
# of the parent's death, so a killed bench never leaves a core burning.
SPIN = """
import os, sys
parent = int(sys.argv[1])
while True:
    for _ in range(2_000_000):
        pass
    if os.getppid() != parent:
        break
"""


def _spinners(count: int) -> list[subprocess.Popen[bytes]]:
    me = str(os.getpid())
    return [subprocess.Popen([sys.executable, "-c", SPIN, me]) for _ in range(count)]


def _cpu_s(pid: int) -> float:
    """User plus system CPU seconds of a live process, from /proc (0 where unreadable)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cpus", type=int, default=1, help="spinning processes (default 1)")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND [ARGS...]")
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command given: busy_beside.py [--cpus N] -- COMMAND [ARGS...]")
    if args.cpus < 1:
        parser.error("--cpus must be at least 1")
    spinners = _spinners(args.cpus)
    started = time.monotonic()
    code = 1
    try:
        proc = subprocess.Popen(command)
        try:
            code = proc.wait()
        except KeyboardInterrupt:
            proc.send_signal(signal.SIGINT)
            code = proc.wait()
    finally:
        wall = time.monotonic() - started
        burnt = sum(_cpu_s(s.pid) for s in spinners)
        own = resource.getrusage(resource.RUSAGE_CHILDREN)  # the command's: no spinner reaped
        for spinner in spinners:
            spinner.kill()
            spinner.wait()
        print(
            f"busy_beside: {' '.join(command)} ran {wall:.0f} s (exit {code}) beside "
            f"{args.cpus} spinning process{'es' if args.cpus != 1 else ''} that used "
            f"{burnt / max(wall, 1e-9):.2f} CPUs on average; the command's processes used "
            f"{(own.ru_utime + own.ru_stime) / max(wall, 1e-9):.2f} CPUs",
            file=sys.stderr,
        )
    return code


if __name__ == "__main__":
    sys.exit(main())
