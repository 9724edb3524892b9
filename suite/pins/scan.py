"""The fail-closed scan behind the pin readers: every changed line of every changed file that could
name a torch install is either explained by a reader that read that file, or makes the answer
`unknown`, naming the file and line.

The readers (suite/pins/files.py, formats.py, dockerfile.py, workflow_file.py) turn what they
understand into exact answers. What they do not understand — a file of a name no reader knows (a
shell script, a compose file, a Makefile), a line a reader skipped (a workflow matrix key no install
uses, a `pip install` inside a Python script) — must not become "no torch change": a torch move
missed there merges with no evidence. So the scan looks at the change itself, not at the files the
readers chose: "no torch change" is said only when no changed line anywhere could move torch.

A line could move torch when it holds a torch requirement (`torch==2.7.0`, `torch>=2`, `torch @
https://…`), a torch wheel (`torch-2.7.0-….whl`), an image whose name holds torch
(`pytorch/pytorch:2.7.0-…`, `rocm/pytorch:latest`), a torch version variable given a value
(`TORCH_VERSION=2.7.0`, `PYTORCH_VERSION: ${{ … }}`, `torch-version: [...]`, `torch: [2.4]`), or a
`pip install`/`conda install` of torch. In Python source, where prose and version checks name torch
freely, a requirement counts only as a whole quoted string. Documentation (Markdown,
reStructuredText, HTML, notebooks) installs nothing and is not scanned.

A changed line of a file a reader read is explained when the reader found a torch (or torchvision,
torchaudio, triton) pin on that line of that side, or when every version the line names is a version
one of that file's pins on that side has (an `ARG TORCH_VERSION=2.7.0` the reader substituted). Lock
files are read whole, by their structure: their lines are explained.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from suite.pins.files import pin_file_kind
from suite.pins.requirement import Pin
from suite.untrusted.git import read_change

SHOWN = 120  # characters of a line quoted in a reason

# Formats whose reader reads the whole file by its structure (a line of a lock names no package).
WHOLE_FILE_FORMATS = frozenset(
    {"uv-lock", "poetry-lock", "pdm-lock", "pipfile-lock", "pylock", "pixi-lock", "conda",
     "pixi-manifest"}
)  # fmt: skip
# Files that install nothing: documentation.
DOC_SUFFIXES = (".md", ".mdx", ".markdown", ".rst", ".html", ".htm", ".ipynb", ".tex", ".adoc")

_TORCH = r"(?<![\w.-])(?:py)?torch(?![\w-])"
_PATTERNS = (
    # a requirement: torch==2.7.0, torch>=2, torch[opt]~=2.1, torch @ https://..., pytorch=2.1
    re.compile(_TORCH + r"\s*(?:\[[^\]]*\])?\s*(?:===?|~=|>=|<=|!=|>|<|@|=)\s*['\"]?[\w*${]", re.I),
    # a table or mapping entry: torch = "2.7.0", "torch": "^2.1", torch = { version = ... }, and
    # a YAML key of versions (a job matrix's torch: [2.2.2, 2.4.1], torch: 2.4)
    re.compile(_TORCH + r"['\"]?\s*[:=]\s*['\"{]", re.I),
    re.compile(_TORCH + r"['\"]?\s*:\s*\[?\s*['\"]?\d", re.I),
    # a wheel
    re.compile(r"(?<![\w-])torch-\d[\w.+!%-]*\.whl", re.I),
    # an image whose name holds torch, with a tag or a digest
    re.compile(r"(?:[\w.-]+/)*[\w.-]*torch[\w.-]*(?::[\w.+-]+|@sha256:[0-9a-f]+)", re.I),
    # a torch version variable, assigned or given a default
    re.compile(
        r"(?<![\w])(?:py)?torch[_-]?(?:version|ver)\b['\"]?\s*(?::-|[:=](?!=))\s*(?:['\"]?\d|\$|\[|\{)",
        re.I,
    ),
    # an install command that names torch, pinned or not
    re.compile(
        r"\b(?:pip[\w.${}-]*|conda|mamba|micromamba|uv\s+pip|poetry)\b.*\b(?:add|install)\b.*"
        + _TORCH,
        re.I,
    ),
)
# In Python source, where prose and version checks name torch freely (`torch>=2.6 needs …`), a
# requirement counts only as a whole quoted string: "torch>=2.9,<2.10", 'torch==2.7.0'.
_QUOTED = re.compile(
    r"['\"](?:py)?torch(?:\[[^\]]*\])?\s*(?:===?|~=|>=|<=|!=|>|<|@)\s*[^'\"\s,]+"
    r"(?:\s*,\s*[^'\"\s,]+)*\s*['\"]",
    re.I,
)
_PY_PATTERNS = (_QUOTED, *_PATTERNS[1:])
_VERSION = re.compile(r"(?<![\w.])v?(\d+(?:\.\d+)+)")
_COMMENT = re.compile(r"(?:^|\s)#(?!egg=|sha256).*$")


@dataclass(frozen=True)
class Changed:
    """A line the change adds (side head) or removes (side base), 1-based on its side."""

    path: str
    side: str  # "base" or "head"
    line: int
    text: str
    gone: bool = False  # a line of a file the change deletes


def could_move_torch(text: str, path: str = "") -> bool:
    """Whether a line (of a file at path) could name a torch install (see the module
    docstring)."""
    line = _COMMENT.sub("", text)
    name = PurePosixPath(path).name.lower()
    python = name.endswith((".py", ".pyi")) and name != "setup.py"
    return any(p.search(line) for p in (_PY_PATTERNS if python else _PATTERNS))


def scanned(path: str) -> bool:
    """Whether a file of this name is scanned: any file but documentation."""
    return not PurePosixPath(path).name.lower().endswith(DOC_SUFFIXES)


def _lines(text: str | None) -> list[str]:
    """A file's lines as a shell, pip or Docker reads them: split at a newline only (a carriage
    return before it dropped), so that line numbers are the tools' and git's."""
    if not text:
        return []
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return [line.removesuffix("\r") for line in lines]


def text_changes(path: str, old: str | None, new: str | None) -> list[Changed]:
    """The lines one file's change removes and adds, by difflib (texts held in memory)."""
    a = _lines(old)
    b = _lines(new)
    out: list[Changed] = []
    matcher = difflib.SequenceMatcher(None, a, b, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        out += [Changed(path, "base", i + 1, a[i], new is None) for i in range(i1, i2)]
        out += [Changed(path, "head", j + 1, b[j]) for j in range(j1, j2)]
    return out


def texts_changes(base: Mapping[str, str], head: Mapping[str, str]) -> list[Changed]:
    """The changed lines of every file of two trees held in memory (path -> text)."""
    out: list[Changed] = []
    for path in sorted(base.keys() | head.keys()):
        if base.get(path) != head.get(path):
            out += text_changes(path, base.get(path), head.get(path))
    return out


def git_changes(repo: Path, base: str, head: str) -> tuple[list[Changed], str | None]:
    """The changed lines between two commits, and why the change could not be scanned (None
    when it was). The files and their contents come through suite/untrusted/git.py, never from
    `git diff`, which a head's .gitattributes steers (`* -diff` hid every line); every file is
    read as text, a binary one included: a NUL byte does not stop a shell script."""
    change = read_change(repo, base, head)
    if change.unread is not None:
        return [], change.unread
    out: list[Changed] = []
    for changed, old, new in change.files:
        out += text_changes(changed.path, _text(old), _text(new))
    return out, None


def _text(content: bytes | None) -> str | None:
    return None if content is None else content.decode("utf-8", "replace")


def _versions(pins: Iterable[Pin]) -> set[tuple[int, ...]]:
    """Every version the pins name: their exact versions (local label dropped) and the ones
    their sides and URLs spell (a git tag v2.7.0, a wheel's torch-2.7.0)."""
    out: set[tuple[int, ...]] = set()
    for pin in pins:
        texts = [pin.version.split("+", 1)[0] if pin.version else "", pin.side, pin.url or ""]
        out.update(_numbers(v) for t in texts for v in _VERSION.findall(t))
    return out


def _numbers(version: str) -> tuple[int, ...]:
    parts = [int(x) for x in version.split(".")]
    while len(parts) > 1 and parts[-1] == 0:
        parts.pop()
    return tuple(parts)


def _explained_by(text: str, line: int, found: Sequence[Pin]) -> bool:
    """Whether a read file's pins explain one of its changed lines: a pin on that line; or the
    line names no version and the file has a torch pin on that side (the line refers to values
    the reader substituted); or every version it names is, or begins, one a pin names (an
    `ARG TORCH_MAJOR_MINOR=2.7` of a 2.7.1 pin)."""
    if any(p.line == line for p in found):
        return True
    named = [_numbers(v) for v in _VERSION.findall(_COMMENT.sub("", text))]
    if not named:
        return any(p.package == "torch" for p in found)
    known = _versions(found)
    return all(any(k[: len(n)] == n for k in known) for n in named)


def unexplained(
    changes: Sequence[Changed],
    pins: Mapping[str, Sequence[Pin]],
    read: Mapping[str, set[str]],
    aliases: Mapping[str, Mapping[str, str]] | None = None,
) -> list[Changed]:
    """The changed lines that could move torch and no reader explains. pins: side -> that
    side's pins; read: side -> the files a reader read on that side (without error); aliases:
    side -> a file read through a symlink -> the link, whose reader read it."""
    by_file: dict[tuple[str, str], list[Pin]] = {}
    for side, side_pins in pins.items():
        for pin in side_pins:
            for file in {pin.file, pin.included} - {None}:
                assert file is not None
                by_file.setdefault((side, file), []).append(pin)
    out = []
    for change in changes:
        if not scanned(change.path) or not could_move_torch(change.text, change.path):
            continue
        path = (aliases or {}).get(change.side, {}).get(change.path, change.path)
        if path in read.get(change.side, set()):
            if pin_file_kind(path) in WHOLE_FILE_FORMATS:
                continue
            if _explained_by(change.text, change.line, by_file.get((change.side, path), [])):
                continue
        out.append(change)
    return _moved_only(out)


_WORD = re.compile(r"(?:py)?torch", re.I)
# A version with its build: a local label (+cu128), or a variant an image tag spells (_cu128).
_SPEC = re.compile(r"\d+(?:\.\d+)+(?:\+[\w.]+|[_-](?:cu|rocm|xpu|hpu|cpu)[\w.]*)?", re.I)


def _signature(text: str) -> tuple[str, ...]:
    """What a line says of torch: at each torch word, the text up to the first version after
    it (with its local label), spaces and quotes dropped, or the word's first token."""
    out = []
    for found in _WORD.finditer(_COMMENT.sub("", text)):
        window = text[found.start() : found.start() + 60]
        version = _SPEC.search(window)
        if version:
            out.append(re.sub(r"[\s'\"]", "", window[: version.end()]))
        else:
            out.append(window.split()[0])
    return tuple(out)


def _moved_only(found: list[Changed]) -> list[Changed]:
    """Of the unexplained lines, those that move torch. A file the change deletes installs
    nothing any more: its lines are left out. In any other file, when the lines it removes
    and those it adds say the same of torch (the same words and versions: a mirror, a flag or
    an OS moved beside an unchanged torch), they are left out too."""
    kept = [c for c in found if not c.gone]
    by_path: dict[str, list[Changed]] = {}
    for change in kept:
        by_path.setdefault(change.path, []).append(change)
    out = []
    for changes in by_path.values():
        said = {
            side: sorted(_signature(c.text) for c in changes if c.side == side)
            for side in ("base", "head")
        }
        if not (said["base"] and said["base"] == said["head"]):
            out += changes
    return out


def reason(change: Changed) -> str:
    """Why a changed line makes the answer unknown."""
    text = change.text.strip()
    shown = text if len(text) <= SHOWN else text[: SHOWN - 1] + "…"
    verb = "adds" if change.side == "head" else "removes"
    return (
        f"line {change.line} {verb} {shown!r}, which could move torch and which no reader explains"
    )
