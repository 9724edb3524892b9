"""Escaping of untrusted text (names, messages, ids from result files) for every report format.

Everything in a decision record that came from a result file or a workload plugin is
untrusted: a workload name or an exception message can carry Markdown, HTML, @mentions,
terminal escape sequences or characters that XML 1.0 forbids. Renderers pass every such
value through one of these functions and never build markup from raw record text.
"""

from __future__ import annotations

import html
import re

MD_LIMIT = 300
CODE_LIMIT = 4000
ELLIPSIS = "…"
# A zero-width joiner after "@" keeps the text readable but stops GitHub from
# resolving a mention (and notifying whoever it names).
ZWJ = "\u200d"
# GitHub only resolves "@name" at the start of text or after a non-word character, so an
# id such as "sdpa@cuda" is left alone: it stays copy-pasteable, without a hidden ZWJ.
_MENTION = re.compile(r"(?<![A-Za-z0-9_])@")

# ASCII punctuation that can start or end Markdown/GFM syntax. "~" (strikethrough) and
# "$" (GitHub math) go beyond CommonMark but are live on github.com.
_MD_BACKSLASH = frozenset("\\`*_{}[]()#+-.!|~$")
# Entities rather than backslashes: a backslash does not stop an HTML block from starting.
_MD_ENTITIES = {"&": "&amp;", "<": "&lt;", ">": "&gt;"}
# C0/C1 controls (whitespace is handled separately), DEL, and bidi overrides that can
# make a line display differently from what it says.
_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
_WHITESPACE = re.compile(r"\s+")
# Characters XML 1.0 does not allow at all, even escaped.
_XML_ILLEGAL = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
_BACKTICK_RUN = re.compile("`+")
_LANG = re.compile(r"[^A-Za-z0-9_+-]")


def cap(text: str, limit: int | None) -> str:
    """Cut text to at most limit characters, marking the cut with an ellipsis."""
    if limit is None or len(text) <= limit:
        return text
    if limit <= 0:
        return ""
    return text[: limit - 1].rstrip() + ELLIPSIS


def one_line(text: object, limit: int | None = MD_LIMIT) -> str:
    """Printable single-line text: whitespace runs become one space, controls go, length capped."""
    raw = text if isinstance(text, str) else str(text)
    # Collapse first, so that a control character cannot glue two words together.
    return cap(_CONTROL.sub("", _WHITESPACE.sub(" ", raw)).strip(), limit)


def unmention(text: str) -> str:
    """Insert a zero-width joiner after every "@" that GitHub could read as a mention."""
    return _MENTION.sub("@" + ZWJ, text)


def md(text: object, limit: int | None = MD_LIMIT) -> str:
    """Inline Markdown that renders as the literal text, safe inside a GFM table cell."""
    out: list[str] = []
    for ch in unmention(one_line(text, limit)):
        if ch in _MD_BACKSLASH:
            out.append("\\" + ch)
        else:
            out.append(_MD_ENTITIES.get(ch, ch))
    return "".join(out)


def html_text(text: object, limit: int | None = MD_LIMIT) -> str:
    """Text for a raw HTML context such as <summary>, where Markdown escapes do not apply."""
    # One line matters here too: a blank line would end the HTML block and let the rest
    # of the text be parsed as Markdown.
    # Backticks are inert in an HTML block, but there is no reason to pass them on at all.
    return html.escape(unmention(one_line(text, limit)), quote=True).replace("`", "&#96;")


def plain(text: object, limit: int | None = MD_LIMIT) -> str:
    """Text for a terminal: one line, no escape sequences that could repaint the screen."""
    return one_line(text, limit)


def xml_safe(text: object) -> str:
    """Text that ElementTree can serialise into well-formed XML 1.0 (it escapes <, & itself)."""
    raw = text if isinstance(text, str) else str(text)
    return _XML_ILLEGAL.sub("\ufffd", raw)


def fence_for(text: str) -> str:
    """A backtick fence longer than any backtick run in text, so the text cannot close it."""
    longest = max((len(run) for run in _BACKTICK_RUN.findall(text)), default=0)
    return "`" * max(3, longest + 1)


def code_block(text: object, lang: str = "", limit: int | None = CODE_LIMIT) -> str:
    """Untrusted multi-line text inside a fenced block that it cannot close early.

    Inside a fenced block HTML such as </details> is shown, not interpreted, so the text
    is kept verbatim apart from control characters: a reproduce command must stay
    copy-pasteable.
    """
    raw = text if isinstance(text, str) else str(text)
    body = raw.replace("\r\n", "\n").replace("\r", "\n")
    body = cap(_CONTROL.sub("", body).strip("\n"), limit)
    fence = fence_for(body)
    # A backtick fence's info string may not contain backticks; keep it to a plain word.
    info = _LANG.sub("", lang)
    return f"{fence}{info}\n{body}\n{fence}"


def code_span(text: object, limit: int | None = MD_LIMIT) -> str:
    """Untrusted text as inline code: one line, delimited by a backtick run it cannot close
    (padded with spaces where it begins or ends with a backtick, as CommonMark strips them)."""
    body = cap(" ".join(_CONTROL.sub("", str(text)).split()), limit)
    longest = max((len(run) for run in _BACKTICK_RUN.findall(body)), default=0)
    ticks = "`" * (longest + 1)
    pad = " " if body.startswith("`") or body.endswith("`") else ""
    return f"{ticks}{pad}{body}{pad}{ticks}"
