"""Head-chosen text printed to a log or a workflow command (suite/untrusted/shown.py): one line,
nothing a runner reads as a command, and nothing lost (different texts print differently)."""

from __future__ import annotations

import random

import pytest

from suite.untrusted.shown import shown

COMMAND_STARTS = ("::", "##[")


@pytest.mark.parametrize(
    ("text", "printed"),
    [
        ("requirements.txt", "requirements.txt"),
        ("requirements\n::error::owned\n.txt", "requirements\\x0a::error::owned\\x0a.txt"),
        ("::add-mask::x", "\\x3a:add-mask::x"),
        ("  ::stop-commands::t", "  \\x3a:stop-commands::t"),
        ("##[group]x", "\\x23#[group]x"),
        ("a\\x0ab", "a\\\\x0ab"),
        ("\x1b[31mred", "\\x1b[31mred"),
        ("\u202eevil", "\\u202eevil"),
        ("\udcff\udcfe.sh", "\\xff\\xfe.sh"),
        ("ünïcode", "ünïcode"),
    ],
)
def test_shown(text: str, printed: str) -> None:
    assert shown(text) == printed


def test_random_text_prints_as_one_line_no_runner_reads() -> None:
    """A seeded property over random code points (controls, separators, surrogate-escaped
    bytes, colons and hashes weighted in): one printable line, never a command start, and two
    different texts never print alike."""
    rng = random.Random(7)
    alphabet = [":", ":", "#", "[", " ", "\n", "\r", "\\", "x", "\u2028", "\x85", "\udc80"]
    seen: dict[str, str] = {}
    for _ in range(3000):
        size = rng.randint(0, 12)
        text = "".join(
            rng.choice(alphabet) if rng.random() < 0.6 else chr(rng.randint(0, 0x3000))
            for _ in range(size)
        )
        out = shown(text, limit=10_000)
        assert out.isprintable(), (text, out)
        assert not out.lstrip(" ").startswith(COMMAND_STARTS), (text, out)
        assert seen.setdefault(out, text) == text, (text, seen[out], out)
