"""Progress lines: one per cell with elapsed time and ETA; colour and a live line on a terminal."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any, TextIO

_COLOURS = {
    "ok": "32",
    "unsupported": "33",
    "skipped": "2",
    "failed": "31",
    "crashed": "31",
    "timeout": "31",
    "oom": "31",
}


def _clock_text(seconds: float) -> str:
    seconds = max(0, round(seconds))
    minutes, secs = divmod(seconds, 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


class Progress:
    def __init__(
        self,
        total: int,
        stream: TextIO | None = None,
        clock: Callable[[], float] = time.monotonic,
        tty: bool | None = None,
    ) -> None:
        self.total = total
        self.stream = stream
        self.clock = clock
        self.start = clock()
        self.done_count = 0
        self.executed = 0
        self.executed_s = 0.0
        self.tty = bool(stream is not None and (stream.isatty() if tty is None else tty))

    def _write(self, text: str) -> None:
        if self.stream is not None:
            self.stream.write(text)
            self.stream.flush()

    def eta_s(self) -> float | None:
        remaining = self.total - self.done_count
        if self.executed == 0:
            return None
        # Per cell done so far, skipped ones included: the rest will skip at the same rate.
        return remaining * self.executed_s / self.done_count

    def note(self, text: str) -> None:
        """A line about work outside the cell count (the counting processes of an A/B)."""
        elapsed = _clock_text(self.clock() - self.start)
        self._write(f"{chr(13) + chr(27) + '[2K' if self.tty else ''}{text}  elapsed {elapsed}\n")

    def starting(self, cell_id: str) -> None:
        if self.tty:
            self._write(f"\r\x1b[2K[{self.done_count + 1}/{self.total}] running {cell_id} …")

    def finished(self, cell_id: str, result: Mapping[str, Any], *, reused: bool = False) -> None:
        self.done_count += 1
        # Never "[40/20]": work beyond the plan (a later look, a rerun) raises the count shown.
        self.total = max(self.total, self.done_count)
        status = result["status"]
        if not reused and status != "skipped":
            self.executed += 1
            self.executed_s += float(result["wall_s"])
        elapsed = self.clock() - self.start
        eta = self.eta_s()
        width = len(str(self.total))
        label = f"{status}{' (resumed)' if reused else ''}"
        if self.tty:
            label = f"\x1b[{_COLOURS.get(status, '0')}m{label}\x1b[0m"
            self._write("\r\x1b[2K")
        detail = ""
        if status not in ("ok", "skipped") and result.get("failure"):
            detail = " — " + result["failure"]["message"].splitlines()[0][:120]
        eta_text = _clock_text(eta) if eta is not None else "?"
        self._write(
            f"[{self.done_count:>{width}}/{self.total}] {label:<11} {cell_id} "
            f"{result['wall_s']:.1f}s"
            f"  elapsed {_clock_text(elapsed)}  eta {eta_text}{detail}\n"
        )

    def done(self) -> None:
        self._write(f"{self.done_count} cells in {_clock_text(self.clock() - self.start)}\n")
