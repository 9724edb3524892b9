"""Head-chosen text on its way to a terminal, a log or a workflow command.

A file name may hold a newline, a carriage return, an escape sequence or bytes that are not
UTF-8, and GitHub Actions reads any log line that starts with `::` (or the older `##[`) as a
workflow command: a pin file named `requirements\\n::error::…\\n.txt` printed as it is would
set an error, mask text or stop command processing. shown() makes any such text one line that
says exactly what the bytes were and that no runner reads as a command.
"""

from __future__ import annotations

import unicodedata

# Text a runner reads as a workflow command at the start of a line, once leading blanks go.
_COMMAND_STARTS = ("::", "##[")


def _escaped(char: str) -> str:
    code = ord(char)
    if 0xDC80 <= code <= 0xDCFF:  # a byte that was not UTF-8 (decoded with surrogateescape)
        return f"\\x{code - 0xDC00:02x}"
    if char == "\\":
        return "\\\\"
    if char == " ":
        return char
    if unicodedata.category(char) in ("Cc", "Cf", "Zl", "Zp", "Zs", "Cs", "Co", "Cn"):
        return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"
    return char


def shown(text: str, limit: int = 300) -> str:
    """text as one printable line: control, format and separator characters (newlines, tabs,
    escapes, bidirectional overrides, zero-width marks), backslashes and undecodable bytes
    escaped; a start a runner would read as a command (`::`, `##[`) escaped too; cut to limit
    characters with the length said."""
    out = "".join(_escaped(c) for c in text)
    if out.lstrip(" ").startswith(_COMMAND_STARTS):
        at = len(out) - len(out.lstrip(" "))
        out = f"{out[:at]}\\x{ord(out[at]):02x}{out[at + 1 :]}"
    if len(out) > limit:
        out = f"{out[:limit]}… ({len(out)} characters)"
    return out
