"""Shell lines to paste: words joined for bash, with the parts that the pasting shell fills in —
the folder it is pasted in, the time of the paste, the user's ids — left unquoted where they
stand, and everything else quoted.

A line is built as words holding placeholders (HERE, TIME, USER); `join` quotes each word's
literal pieces and puts the shell expression of each placeholder between them, so a path with
spaces under the pasting folder becomes "$PWD"'/a b/c', which bash reads as one word.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path

# Plain path-safe names, so that words holding them go through Path and mounts_for unchanged.
HERE = "/__torch_matrix_here__"  # the folder the line is pasted in (a results artifact)
TIME = "__torch_matrix_time__"  # UTC time of the paste: a fresh output folder on every paste
USER = "__torch_matrix_user__"  # the pasting user's uid:gid, for docker run --user
EXPANSIONS = {
    HERE: '"$PWD"',
    TIME: '"$(date -u +%Y%m%dT%H%M%SZ)"',
    USER: '"$(id -u):$(id -g)"',
}
_SAFE_DEFAULT = re.compile(r"[A-Za-z0-9_./:@+-]+")


def variable(name: str, default: str) -> tuple[str, str]:
    """A placeholder for the word "${NAME:-default}" and that expression: the pasting shell's
    NAME where it is set (an image rebuilt from its recipe), else the recorded default."""
    if not re.fullmatch(r"[A-Z_][A-Z0-9_]*", name) or not _SAFE_DEFAULT.fullmatch(default):
        raise ValueError(f"not a plain variable and default: {name!r}, {default!r}")
    return f"__torch_matrix_var_{name.lower()}__", f'"${{{name}:-{default}}}"'


def join(words: Sequence[str], variables: Mapping[str, str] | None = None) -> str:
    """The words as one bash line, each placeholder replaced by its unquoted expression;
    variables are more placeholders (from variable())."""
    expansions = {**EXPANSIONS, **(variables or {})}
    pattern = re.compile("|".join(re.escape(p) for p in expansions))
    out = []
    for word in words:
        pieces: list[str] = []
        last = 0
        for found in pattern.finditer(word):
            if found.start() > last:
                pieces.append(shlex.quote(word[last : found.start()]))
            pieces.append(expansions[found[0]])
            last = found.end()
        if last < len(word) or not pieces:
            pieces.append(shlex.quote(word[last:]))
        out.append("".join(pieces))
    return " ".join(out)


def under(path: Path, root: Path | None) -> Path:
    """path as the line names it: below HERE when it lies under root (the folder the line is
    pasted in), else as it is."""
    if root is not None:
        absolute = Path(path).absolute()
        if absolute.is_relative_to(root.absolute()):
            return Path(HERE) / absolute.relative_to(root.absolute())
    return Path(path)
