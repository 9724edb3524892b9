"""Reading the tracked pins (torch, torchvision, torchaudio, triton) out of one file:
requirements/constraints files and pyproject.toml here, every other format through
suite/pins/formats.py. suite/pins/assess.py compares what two trees pin.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name, canonicalize_version
from packaging.version import InvalidVersion, Version

from suite.pins import formats as pin_formats
from suite.pins.dockerfile import read_dockerfile
from suite.pins.formats import Found, Unreadable, tracked

if sys.version_info >= (3, 11):
    import tomllib
else:  # the same parser, from PyPI, before 3.11
    import tomli as tomllib  # type: ignore[import-not-found, unused-ignore]

# Only text that starts like a tracked requirement is an error when it does not parse: prose in
# a requirements/README.txt that mentions torch is not.
_TORCH_LINE = re.compile(r"^(?:torch|torchvision|torchaudio|triton)\s*(?:\[|[=<>!~@;]|$)", re.I)
_COMMENT = re.compile(r"(^|\s)#.*$")
_INDEX_OPTION = re.compile(r"^(--index-url|--extra-index-url|-i)(?:\s*=\s*|\s+)?(\S+)")
_ANY_TORCH = re.compile(r"\btorch\b", re.IGNORECASE)
_NOT_REQUIREMENTS_IN = frozenset({"manifest.in", "makefile.in"})
# A requirement found in pyproject.toml: TOML path, text, its line's pattern, index URL.
_Found = tuple[str, str, "re.Pattern[str]", "str | None"]


@dataclass(frozen=True)
class Pin:
    file: str
    line: int  # 1-based; in pyproject.toml, the line the requirement is written on
    requirement: str  # as packaging normalizes it, markers included
    specifier: str  # "==2.13.0"; "" for a direct URL
    version: str | None  # the exact version of an == or === pin, local label included
    side: str  # what `ab --baseline/--candidate` takes: torch[extras] and specifier or URL
    url: str | None = None
    index_url: str | None = None
    extra_index_urls: tuple[str, ...] = ()
    package: str = "torch"  # or torchvision, torchaudio, triton
    kind: str = "manifest"  # "lock": one resolved version, which wins over a manifest's range
    image: str | None = None  # the pin is this image (a Dockerfile's FROM pytorch/pytorch:...)

    @property
    def exact(self) -> bool:
        return self.version is not None or self.url is not None

    @property
    def key(self) -> str:
        """Equal for pins of the same torch: ==2.13 is ==2.13.0, and extras change no torch."""
        if self.url:
            return f"@ {self.url}"
        if self.version is not None and not self.specifier.startswith("==="):
            return f"=={canonicalize_version(self.version)}"
        return self.specifier


def pin_file_kind(path: str) -> str | None:
    """The format of a file that may pin torch ('requirements', 'pyproject', 'uv-lock', ...,
    'dockerfile'); None for any other file."""
    p = PurePosixPath(path)
    name = p.name.lower()
    if name == "pyproject.toml":
        return "pyproject"
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


def _make_pin(
    file: str,
    line: int,
    req: Requirement,
    index_url: str | None,
    extra: tuple[str, ...] = (),
    kind: str = "manifest",
    image: str | None = None,
) -> Pin | None:
    specs = list(req.specifier)
    if not specs and not req.url:
        return None  # a bare `torch` takes whatever is there: not a pin
    exact = len(specs) == 1 and specs[0].operator in ("==", "===") and "*" not in specs[0].version
    extras = f"[{','.join(sorted(req.extras))}]" if req.extras else ""
    package = tracked(req.name) or canonicalize_name(req.name)
    return Pin(
        file=file,
        line=line,
        requirement=str(req),
        specifier=str(req.specifier),
        version=specs[0].version if exact else None,
        side=f"{package}{extras} @ {req.url}" if req.url else f"{package}{extras}{req.specifier}",
        url=req.url,
        index_url=index_url,
        extra_index_urls=extra,
        package=package,
        kind=kind,
        image=image,
    )


def _parse(text: str, file: str, where: str) -> Requirement | None:
    """The requirement of a tracked package (torch, torchvision, ...), None for anything else."""
    try:
        req = Requirement(text)
    except InvalidRequirement as exc:
        if _TORCH_LINE.match(text):
            raise Unreadable(f"{where}: requirement does not parse: {exc}") from None
        return None
    return req if tracked(req.name) == canonicalize_name(req.name) else None


def _logical_lines(text: str) -> Iterator[tuple[int, str]]:
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
    for number, line in _logical_lines(text):
        if line.startswith("-"):
            # pip applies index options to the whole file, wherever they are written.
            option = _INDEX_OPTION.match(line)
            if option and option[1] == "--extra-index-url":
                extra.append(option[2])
            elif option:
                index_url = option[2]
            continue
        # Per-requirement options (--hash=...) follow the requirement; pip splits there too.
        words = line.split()
        cut = next((i for i, w in enumerate(words) if w.startswith("-")), len(words))
        req = _parse(" ".join(words[:cut]), file, f"line {number}")
        if req is not None:
            found.append((number, req))
    pins = (_make_pin(file, n, req, index_url, tuple(extra)) for n, req in found)
    return [p for p in pins if p is not None]


def _table(doc: Any, *keys: str) -> dict[str, Any]:
    for key in keys:
        doc = doc.get(key) if isinstance(doc, dict) else None
    return doc if isinstance(doc, dict) else {}


def _poetry_spec(value: str, file: str, path: str) -> str:
    """A poetry constraint as a PEP 440 specifier: 2.13.0 is ==2.13.0, ^2.13 is >=2.13,<3."""
    v = value.strip()
    if v in ("", "*") or v[0] not in "^~" or v.startswith("~="):
        return f"=={v}" if v[:1].isdigit() else v.strip("*")
    base = v[1:].strip()
    try:
        release = list(Version(base).release)
    except InvalidVersion:
        raise Unreadable(f"{path}: {value!r} is not a version") from None
    # Caret: below the next change of the first non-zero part; tilde: of the minor part.
    at = next((i for i, n in enumerate(release) if n), len(release) - 1)
    at = min(1, len(release) - 1) if v[0] == "~" else at
    return f">={base},<{'.'.join(map(str, [*release[:at], release[at] + 1]))}"


def _poetry_requirement(
    name: str, value: Any, sources: Mapping[Any, Any], file: str, path: str
) -> _Found:
    dep = value if isinstance(value, dict) else {"version": value}
    extras = dep.get("extras") or []
    req = name + (f"[{','.join(map(str, extras))}]" if extras else "")
    if isinstance(dep.get("url"), str):
        req += f" @ {dep['url']}"
    elif isinstance(dep.get("version"), str):
        req += _poetry_spec(dep["version"], file, path)
    # git and path dependencies carry no version: the bare name that is left is no pin.
    if isinstance(dep.get("markers"), str):
        req += f"; {dep['markers']}"
    pattern = re.compile(
        rf'^\s*(?:"{re.escape(name)}"|{re.escape(name)})\s*=|\.{re.escape(name)}\]\s*$', re.I
    )
    return path, req, pattern, sources.get(dep.get("source"))


def _pyproject_requirements(doc: dict[str, Any], file: str) -> list[_Found]:
    uv = _table(doc, "tool", "uv")
    source = _table(uv, "sources").get("torch")
    source = source[0] if isinstance(source, list) and source else source
    uv_index = source.get("index") if isinstance(source, dict) else None
    uv_urls = {i.get("name"): i.get("url") for i in uv.get("index", []) if isinstance(i, dict)}
    project = _table(doc, "project")
    lists = {"$.project.dependencies": project.get("dependencies")}
    for k, v in _table(project, "optional-dependencies").items():
        lists[f"$.project.optional-dependencies.{k}"] = v
    for k, v in _table(doc, "dependency-groups").items():
        lists[f"$.dependency-groups.{k}"] = v
    found: list[_Found] = []
    for path, items in lists.items():
        for i, item in enumerate(items if isinstance(items, list) else []):
            if isinstance(item, str):  # {include-group = ...} tables name no package
                pattern = re.compile(re.escape(item))
                found.append((f"{path}[{i}]", item, pattern, uv_urls.get(uv_index)))
    poetry = _table(doc, "tool", "poetry")
    sources = {s.get("name"): s.get("url") for s in poetry.get("source", []) if isinstance(s, dict)}
    tables = {f"$.tool.poetry.{k}": poetry.get(k) for k in ("dependencies", "dev-dependencies")}
    for group, table in _table(poetry, "group").items():
        tables[f"$.tool.poetry.group.{group}.dependencies"] = _table(table, "dependencies")
    for path, deps in tables.items():
        for name, value in deps.items() if isinstance(deps, dict) else ():
            for dep in value if isinstance(value, list) else [value]:
                if tracked(name) == canonicalize_name(name):
                    found.append(_poetry_requirement(name, dep, sources, file, f"{path}.{name}"))
    return found


def _pyproject_pins(file: str, text: str) -> list[Pin]:
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise Unreadable(f"not valid TOML: {exc}") from None
    lines, taken, pins = text.splitlines(), set(), []
    for path, req_text, pattern, index_url in _pyproject_requirements(doc, file):
        req = _parse(req_text, file, path)
        if req is None:
            continue
        # tomllib keeps no positions: the first matching line not yet given to another pin.
        exact = [n for n, s in enumerate(lines, 1) if pattern.search(s)]
        loose = [n for n, s in enumerate(lines, 1) if _ANY_TORCH.search(s)]
        line = next((n for n in exact + loose if n not in taken), (exact + loose + [1])[0])
        taken.add(line)
        pin = _make_pin(file, line, req, index_url)
        pins += [pin] if pin else []
    return pins


def _requirement_word(word: str) -> tuple[str, str] | None:
    """(package, requirement) of one `pip install` argument of a tracked package."""
    try:
        req = Requirement(word)
    except InvalidRequirement:
        return None
    package = tracked(req.name)
    return (package, str(req)) if package == canonicalize_name(req.name) else None


def _from_found(file: str, found: list[Found]) -> list[Pin]:
    pins = []
    for f in found:
        try:
            req = Requirement(f.requirement)
        except InvalidRequirement as exc:
            raise Unreadable(f"{f.where}: {f.requirement!r} does not parse: {exc}") from None
        pin = _make_pin(file, f.line, req, f.index_url, kind=f.kind, image=f.image)
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
        return _pyproject_pins(path, text)
    if kind == "requirements":
        return _requirements_pins(path, text)
    if kind == "conda":
        return _from_found(path, pin_formats.read_conda(text, _pip_found))
    if kind == "dockerfile":
        return _from_found(path, read_dockerfile(text, _requirement_word))
    reader = _READERS.get(kind or "")
    return _from_found(path, reader(text)) if reader else []
