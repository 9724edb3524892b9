"""Reading the tracked pins (torch, torchvision, torchaudio, triton) out of one file:
requirements/constraints files here, pyproject.toml through suite/pins/pyproject.py, every other
format through suite/pins/formats.py and suite/pins/dockerfile.py. The files a requirements file
includes (-r/-c) are followed by suite/pins/includes.py; suite/pins/assess.py compares what two
trees pin.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import PurePosixPath

from packaging.requirements import InvalidRequirement, Requirement

from suite.pins import formats as pin_formats
from suite.pins.dockerfile import read_dockerfile
from suite.pins.formats import Found, Unreadable
from suite.pins.pyproject import pyproject_pins
from suite.pins.requirement import Pin, make_pin, parse_tracked, url_requirement
from suite.pins.setup_files import read_setup_cfg, read_setup_py
from suite.pins.workflow_file import read_workflow

__all__ = ["Pin", "logical_lines", "pin_file_kind", "pins_in_file"]

_COMMENT = re.compile(r"(^|\s)#.*$")
_INDEX_OPTION = re.compile(r"^(--index-url|--extra-index-url|-i)(?:\s*=\s*|\s+)?(\S+)")
# An editable install from a VCS URL is a requirement too (-e git+https://...#egg=torch).
_EDITABLE = re.compile(r"^(?:-e|--editable)(?:\s*=\s*|\s+)(\S+)")
_NOT_REQUIREMENTS_IN = frozenset({"manifest.in", "makefile.in"})


def pin_file_kind(path: str) -> str | None:
    """The format of a file that may pin torch ('requirements', 'pyproject', 'uv-lock', ...,
    'dockerfile'); None for any other file."""
    p = PurePosixPath(path)
    name = p.name.lower()
    if name == "pyproject.toml":
        return "pyproject"
    if name in ("setup.py", "setup.cfg"):
        return "setup-" + name.rsplit(".", 1)[1]
    other = pin_formats.format_of(path)
    if other is not None:
        return other
    if name.endswith(".txt"):
        in_dir = any(part.lower().startswith("requirements") for part in p.parts[:-1])
        named = name.startswith(("requirements", "constraints"))
        return "requirements" if in_dir or named else None
    # pip-tools inputs; config.h.in, setup.py.in and MANIFEST.in are templates, not requirements.
    stem = name[: -len(".in")]
    if name.endswith(".in") and stem and "." not in stem and name not in _NOT_REQUIREMENTS_IN:
        return "requirements"
    return None


def logical_lines(text: str) -> Iterator[tuple[int, str]]:
    """pip's view of a requirements file: continuations joined, comments removed."""
    start, parts = 0, list[str]()
    for number, raw in enumerate(text.splitlines(), 1):
        start = start if parts else number
        parts.append(raw.removesuffix("\\"))
        if raw.endswith("\\"):
            continue
        line = _COMMENT.sub("", " ".join(parts)).strip()
        parts = []
        if line:
            yield start, line


def _requirements_pins(file: str, text: str) -> list[Pin]:
    index_url: str | None = None
    extra: list[str] = []
    found: list[tuple[int, Requirement]] = []
    for number, line in logical_lines(text):
        where = f"line {number}"
        if line.startswith("-"):
            # pip applies index options to the whole file, wherever they are written.
            option = _INDEX_OPTION.match(line)
            editable = _EDITABLE.match(line)
            if option and option[1] == "--extra-index-url":
                extra.append(option[2])
            elif option:
                index_url = option[2]
            elif editable and (req := url_requirement(editable[1], where)) is not None:
                found.append((number, req))
            continue
        # Per-requirement options (--hash=...) follow the requirement; pip splits there too.
        words = line.split()
        cut = next((i for i, w in enumerate(words) if w.startswith("-")), len(words))
        req = parse_tracked(" ".join(words[:cut]), where)
        if req is not None:
            found.append((number, req))
    pins = (make_pin(file, n, req, index_url, tuple(extra)) for n, req in found)
    return [p for p in pins if p is not None]


def _requirement_word(word: str) -> tuple[str, str] | None:
    """(package, requirement) of one `pip install` argument of a tracked package. Raises
    Unreadable for a word that starts like one and does not parse."""
    req = parse_tracked(word, repr(word))
    return (pin_formats.tracked(req.name) or req.name, str(req)) if req else None


def _from_found(file: str, found: list[Found]) -> list[Pin]:
    pins = []
    for f in found:
        try:
            req = Requirement(f.requirement)
        except InvalidRequirement as exc:
            raise Unreadable(f"{f.where}: {f.requirement!r} does not parse: {exc}") from None
        pin = make_pin(file, f.line, req, f.index_url, kind=f.kind, image=f.image, part=f.part)
        pins += [pin] if pin else []
    return pins


def _pip_found(text: str) -> list[Found]:
    return [
        Found(p.package, p.requirement, p.line, f"line {p.line}", "manifest", p.index_url)
        for p in _requirements_pins("<pip>", text)
    ]


_READERS = {
    "uv-lock": pin_formats.read_uv_lock,
    "poetry-lock": pin_formats.read_poetry_lock,
    "pdm-lock": pin_formats.read_pdm_lock,
    "pipfile-lock": pin_formats.read_pipfile_lock,
    "pylock": pin_formats.read_pylock,
    "pixi-manifest": pin_formats.read_pixi_manifest,
    "pixi-lock": pin_formats.read_pixi_lock,
}


def pins_in_file(path: str, text: str, *, kind: str | None = None) -> list[Pin]:
    """Tracked pins in one file; kind overrides what the file name says. Raises Unreadable."""
    kind = kind or pin_file_kind(path)
    if kind == "pyproject":
        return pyproject_pins(path, text)
    if kind == "requirements":
        return _requirements_pins(path, text)
    if kind == "conda":
        return _from_found(path, pin_formats.read_conda(text, _pip_found))
    if kind == "dockerfile":
        return _from_found(path, read_dockerfile(text, _requirement_word))
    if kind == "workflow":
        return _from_found(path, read_workflow(text, _requirement_word))
    if kind == "setup-py":
        return _from_found(path, read_setup_py(text, _requirement_word))
    if kind == "setup-cfg":
        return _from_found(path, read_setup_cfg(text, _requirement_word))
    reader = _READERS.get(kind or "")
    return _from_found(path, reader(text)) if reader else []
