"""No test asserts how long something took: on a loaded machine any bound fails by chance.
Speed lives in bench/, which prints figures; a test asserts what was recorded or decided."""

from __future__ import annotations

import re

from tests.helpers import TESTS

# An assert that measures an elapsed time, or bounds a recorded wall time by a number.
CLOCK = re.compile(r"\b(monotonic|perf_counter|process_time|time\.time)\(\)\s*-")
BOUND = re.compile(r"wall_s\W*\s*(<|<=|>=|>)\s*[1-9]")


def test_no_test_asserts_a_wall_time() -> None:
    found = []
    for path in sorted(TESTS.rglob("*.py")):
        if path.name == "test_no_wall_clock.py":  # its own examples of what it forbids
            continue
        for number, line in enumerate(path.read_text("utf-8").splitlines(), 1):
            code = line.strip()
            if code.startswith("assert") and (CLOCK.search(code) or BOUND.search(code)):
                found.append(f"{path.relative_to(TESTS)}:{number}: {code}")
    assert found == []


def test_the_scan_sees_what_it_forbids() -> None:
    assert CLOCK.search("assert time.monotonic() - start < 60")
    assert BOUND.search('assert doc["wall_s"] < 60')
    assert not BOUND.search('assert doc["wall_s"] > 0')  # a recorded figure, present
    assert not CLOCK.search("assert run_cell(spec, time.perf_counter()) == 0")  # a start time
