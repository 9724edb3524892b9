"""The CPU's own instruction counter, read through Linux's perf_event_open(2): where the machine
has a performance monitoring unit (bare metal, and cloud VMs that expose one), a counting worker
counts its step at native speed instead of under Valgrind, which costs ~50x per instrumented
call and minutes of translation per process.

The counter counts the instructions retired in user space (exclude_kernel, exclude_hv) by the
calling thread alone (pid 0, any CPU, no inheritance): the counting worker runs torch on one
thread (suite/execute/counting.py COUNT_ENV), so the thread's count is the step's. What it counts
differs from callgrind's in two ways the gate's message says: the kernels torch picks natively
(AVX-512 where the host has it, where Valgrind's CPU reports AVX2), and no per-function totals.

Where the call fails (no PMU: ENOENT, as in most VMs; perf_event_paranoid above 2, or a
container's seccomp profile: EACCES/EPERM) `available()` says why, and counting stays with
callgrind."""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import struct
import sys

# <linux/perf_event.h>
PERF_TYPE_HARDWARE = 0
PERF_TYPE_SOFTWARE = 1
PERF_COUNT_HW_INSTRUCTIONS = 1
PERF_COUNT_SW_TASK_CLOCK = 1
_ATTR_SIZE = 128  # PERF_ATTR_SIZE_VER8 and beyond fit; the kernel takes any size it knows
_FLAGS_OFFSET = 40  # after type, size, config, sample_period, sample_type, read_format
_DISABLED, _EXCLUDE_KERNEL, _EXCLUDE_HV = 1 << 0, 1 << 5, 1 << 6
_ENABLE, _DISABLE, _RESET = 0x2400, 0x2401, 0x2403  # _IO('$', 0), _IO('$', 1), _IO('$', 3)
_SYSCALL = {"x86_64": 298, "aarch64": 241, "ppc64le": 319, "s390x": 331}
# The event counted: the hardware's instructions retired. Kept as data so that a check of the
# path on a machine without a PMU can count a software event through the same calls.
EVENT = (PERF_TYPE_HARDWARE, PERF_COUNT_HW_INSTRUCTIONS)


class CounterUnavailable(RuntimeError):
    """perf_event_open refused: the message says why and what would allow it."""


def _why(code: int) -> str:
    if code == errno.ENOENT:
        return "this CPU exposes no hardware instruction counter (no PMU, as in most VMs)"
    if code in (errno.EACCES, errno.EPERM):
        return (
            "perf_event_open is not allowed here (kernel.perf_event_paranoid above 2, or a "
            "container's seccomp profile; sysctl kernel.perf_event_paranoid=2 allows a "
            "process's own counters)"
        )
    return f"perf_event_open failed: {os.strerror(code)}"


class ThreadInstructions:
    """One counter of the calling thread's user-space instructions, opened disabled."""

    def __init__(self, event: tuple[int, int] | None = None) -> None:
        if not sys.platform.startswith("linux"):
            raise CounterUnavailable("hardware counters are read through Linux's perf_event_open")
        number = _SYSCALL.get(platform.machine())
        if number is None:
            raise CounterUnavailable(f"no perf_event_open syscall number for {platform.machine()}")
        kind, config = event or EVENT
        attr = bytearray(_ATTR_SIZE)
        struct.pack_into("IIQ", attr, 0, kind, _ATTR_SIZE, config)
        struct.pack_into("Q", attr, _FLAGS_OFFSET, _DISABLED | _EXCLUDE_KERNEL | _EXCLUDE_HV)
        libc = ctypes.CDLL(None, use_errno=True)
        buffer = ctypes.create_string_buffer(bytes(attr), _ATTR_SIZE)
        fd = libc.syscall(number, buffer, 0, -1, -1, 0)  # this thread, any CPU, no group
        if fd < 0:
            raise CounterUnavailable(_why(ctypes.get_errno()))
        self._fd = int(fd)
        self._ioctl = libc.ioctl

    def start(self) -> None:
        self._ioctl(self._fd, _RESET, 0)
        self._ioctl(self._fd, _ENABLE, 0)

    def stop(self) -> int:
        """Stop counting; the instructions counted since start()."""
        self._ioctl(self._fd, _DISABLE, 0)
        (value,) = struct.unpack("Q", os.read(self._fd, 8))
        return int(value)

    def close(self) -> None:
        os.close(self._fd)


def available(event: tuple[int, int] | None = None) -> tuple[bool, str]:
    """Whether this process can count its own instructions here, and why not."""
    try:
        counter = ThreadInstructions(event)
    except CounterUnavailable as exc:
        return False, str(exc)
    counter.close()
    return True, ""
