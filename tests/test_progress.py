"""Progress lines with an injected clock: plain in logs, ETA from the cells done so far."""

from __future__ import annotations

import io

from suite.execute.progress import Progress


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_plain_lines_with_eta() -> None:
    out, clock = io.StringIO(), Clock()
    progress = Progress(4, stream=out, clock=clock, tty=False)
    clock.now += 10
    progress.finished("a@cpu", {"status": "ok", "wall_s": 10.0, "failure": None})
    progress.finished("a@cuda", {"status": "skipped", "wall_s": 0.0, "failure": {"message": "no"}})
    lines = out.getvalue().splitlines()
    assert lines[0] == "[1/4] ok          a@cpu 10.0s  elapsed 0:10  eta 0:30"
    # half the cells so far were skipped: the two left should take 10 s, not 20 s
    assert lines[1].startswith("[2/4] skipped     a@cuda 0.0s  elapsed 0:10  eta 0:10")
    assert "\x1b" not in out.getvalue()


def test_failure_detail_and_colour_on_a_terminal() -> None:
    out = io.StringIO()
    progress = Progress(1, stream=out, clock=Clock(), tty=True)
    progress.finished(
        "b@cpu",
        {
            "status": "crashed",
            "wall_s": 1.0,
            "failure": {"message": "worker killed by SIGSEGV\ntraceback"},
        },
    )
    text = out.getvalue()
    assert "\x1b[31mcrashed" in text and "— worker killed by SIGSEGV" in text
    assert "traceback" not in text


def test_work_beyond_the_plan_never_reads_more_done_than_planned() -> None:
    out, clock = io.StringIO(), Clock()
    progress = Progress(1, stream=out, clock=clock, tty=False)
    for cell in ("a@cpu", "a@cpu again"):
        clock.now += 5
        progress.finished(cell, {"status": "ok", "wall_s": 5.0, "failure": None})
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("[1/1] ok") and lines[1].startswith("[2/2] ok"), lines
