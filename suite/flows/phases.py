"""Where an A/B's wall time went: the seconds of each phase, in the order they ran."""

from __future__ import annotations

import time


class Phases:
    """Wall seconds of each phase of an A/B, in the order they ran: where its time went. A
    phase that ran beside another is named in `overlapping`, with the one it ran beside."""

    def __init__(self, known: dict[str, float]) -> None:
        self.seconds = {name: round(value, 1) for name, value in known.items()}
        self.overlapping: dict[str, str] = {}
        self._current: tuple[str, float] | None = None

    def beside(self, name: str, other: str, seconds: float) -> None:
        self.seconds[name] = round(seconds, 1)
        self.overlapping[name] = other

    def begin(self, name: str) -> None:
        self._end()
        self._current = (name, time.monotonic())

    def _end(self) -> None:
        if self._current is not None:
            name, began = self._current
            self.seconds[name] = round(self.seconds.get(name, 0.0) + time.monotonic() - began, 1)
            self._current = None

    def done(self) -> dict[str, float]:
        self._end()
        return dict(self.seconds)
