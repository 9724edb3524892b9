"""Torch pin-bump detection: torch pins in requirements and pyproject files, two sides compared.

A pin becomes a side for `ab` (`torch==2.14.1`): markers are dropped because a side is one
interpreter, and the index a pin installs from is recorded beside it, not folded into it.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name, canonicalize_version
from packaging.version import InvalidVersion, Version

from suite.errors import EnvironmentProblem, InputError

if sys.version_info >= (3, 11):
    import tomllib
else:  # the same parser, from PyPI, before 3.11
    import tomli as tomllib  # type: ignore[import-not-found, unused-ignore]

GIT_TIMEOUT_S = 60.0
MAX_FILE_BYTES = 1 << 20  # a requirements file this large is generated data, not a pin
# Only text that starts like a torch requirement is an error when it does not parse: prose in
# a requirements/README.txt that mentions torch is not.
_TORCH_LINE = re.compile(r"^torch\s*(?:\[|[=<>!~@;]|$)", re.IGNORECASE)
_COMMENT = re.compile(r"(^|\s)#.*$")
_INDEX_OPTION = re.compile(r"^(--index-url|--extra-index-url|-i)(?:\s*=\s*|\s+)?(\S+)")
_POETRY_KEY = re.compile(r'^\s*(?:"torch"|torch)\s*=|\.torch\]\s*$', re.IGNORECASE)
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


@dataclass(frozen=True)
class Bump:
    baseline: str | None  # None: the head adds a torch pin the base did not have
    candidate: str | None  # None: the head removes the pin
    files: tuple[str, ...]  # files whose torch pins differ between the sides
    baseline_pin: Pin | None
    candidate_pin: Pin | None

    @property
    def message(self) -> str:
        where = ", ".join(self.files)
        if self.baseline is None:
            return f"torch pin added: {self.candidate} (no baseline pin) in {where}"
        if self.candidate is None:
            return f"torch pin removed: {self.baseline} (no candidate pin) in {where}"
        return f"torch pin changed: {self.baseline} -> {self.candidate} in {where}"


def pin_file_kind(path: str) -> str | None:
    """'pyproject' or 'requirements' for files that may pin torch; None for any other file."""
    p = PurePosixPath(path)
    name = p.name.lower()
    if name == "pyproject.toml":
        return "pyproject"
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
    file: str, line: int, req: Requirement, index_url: str | None, extra: tuple[str, ...] = ()
) -> Pin | None:
    specs = list(req.specifier)
    if not specs and not req.url:
        return None  # a bare `torch` takes whatever is there: not a pin
    exact = len(specs) == 1 and specs[0].operator in ("==", "===") and "*" not in specs[0].version
    extras = f"[{','.join(sorted(req.extras))}]" if req.extras else ""
    return Pin(
        file=file,
        line=line,
        requirement=str(req),
        specifier=str(req.specifier),
        version=specs[0].version if exact else None,
        side=f"torch{extras} @ {req.url}" if req.url else f"torch{extras}{req.specifier}",
        url=req.url,
        index_url=index_url,
        extra_index_urls=extra,
    )


def _parse(text: str, file: str, where: str) -> Requirement | None:
    """The requirement, None when the text is no torch requirement at all."""
    try:
        req = Requirement(text)
    except InvalidRequirement as exc:
        if _TORCH_LINE.match(text):
            why = f"torch requirement does not parse: {exc}"
            raise InputError(why, file=file, path=where) from None
        return None
    return req if canonicalize_name(req.name) == "torch" else None


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
        raise InputError(f"{value!r} is not a version", file=file, path=path) from None
    # Caret: below the next change of the first non-zero part; tilde: of the minor part.
    at = next((i for i, n in enumerate(release) if n), len(release) - 1)
    at = min(1, len(release) - 1) if v[0] == "~" else at
    return f">={base},<{'.'.join(map(str, [*release[:at], release[at] + 1]))}"


def _poetry_requirement(value: Any, sources: Mapping[Any, Any], file: str, path: str) -> _Found:
    dep = value if isinstance(value, dict) else {"version": value}
    extras = dep.get("extras") or []
    req = "torch" + (f"[{','.join(map(str, extras))}]" if extras else "")
    if isinstance(dep.get("url"), str):
        req += f" @ {dep['url']}"
    elif isinstance(dep.get("version"), str):
        req += _poetry_spec(dep["version"], file, path)
    # git and path dependencies carry no version: the bare name that is left is no pin.
    if isinstance(dep.get("markers"), str):
        req += f"; {dep['markers']}"
    return path, req, _POETRY_KEY, sources.get(dep.get("source"))


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
                if canonicalize_name(name) == "torch":
                    found.append(_poetry_requirement(dep, sources, file, f"{path}.{name}"))
    return found


def _pyproject_pins(file: str, text: str) -> list[Pin]:
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"not valid TOML: {exc}", file=file) from None
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


def pins_in_file(path: str, text: str, *, kind: str | None = None) -> list[Pin]:
    """Torch pins in one file; kind ('requirements' or 'pyproject') overrides the file name."""
    kind = kind or pin_file_kind(path)
    if kind == "pyproject":
        return _pyproject_pins(path, text)
    return _requirements_pins(path, text) if kind == "requirements" else []


def find_torch_pins(files: Mapping[str, str]) -> list[Pin]:
    """Torch pins in every file that may hold one, in path order; other files are ignored."""
    return [pin for path in sorted(files) for pin in pins_in_file(path, files[path])]


def effective_pin(pins: Sequence[Pin], side: str = "this") -> Pin | None:
    """The one torch a side installs. Exact pins win over ranges: a lock beside a range."""
    chosen = [p for p in pins if p.exact] or list(pins)
    for other in chosen[1:]:
        first = chosen[0]
        if other.key != first.key:
            raise InputError(
                f"torch is pinned differently on the {side} side: {first.file}:{first.line} has "
                f"{first.side!r} but {other.file}:{other.line} has {other.side!r}; pin one torch "
                "everywhere, or compare single files with --base-file/--head-file",
                file=first.file,
                path=f"line {first.line}",
            )
    return chosen[0] if chosen else None


def compare_pins(
    base: Sequence[Pin], head: Sequence[Pin], *, base_label: str = "base", head_label: str = "head"
) -> Bump | None:
    """The bump from one side's pins to the other's; None when both install the same torch."""
    old, new = effective_pin(base, base_label), effective_pin(head, head_label)
    if (old.key if old else None) == (new.key if new else None):
        return None
    keys: tuple[dict[str, set[str]], dict[str, set[str]]] = ({}, {})
    for pins, by_file in zip((base, head), keys, strict=True):
        for pin in pins:
            by_file.setdefault(pin.file, set()).add(pin.key)
    a, b = keys
    return Bump(
        baseline=old.side if old else None,
        candidate=new.side if new else None,
        files=tuple(sorted(f for f in a.keys() | b.keys() if a.get(f) != b.get(f))),
        baseline_pin=old,
        candidate_pin=new,
    )


def detect_bump(
    base: Mapping[str, str],
    head: Mapping[str, str],
    *,
    base_label: str = "base",
    head_label: str = "head",
) -> Bump | None:
    """Compare the torch pins of two trees (path -> text); None when no torch pin changed."""
    return compare_pins(
        find_torch_pins(base), find_torch_pins(head), base_label=base_label, head_label=head_label
    )


def _git(repo: Path, args: Sequence[str], ref: str) -> bytes:
    argv = ["git", "-C", str(repo), *args]
    try:
        proc = subprocess.run(argv, capture_output=True, timeout=GIT_TIMEOUT_S, check=False)
    except FileNotFoundError:
        raise EnvironmentProblem("git is not installed (needed to read --base/--head)") from None
    except subprocess.TimeoutExpired:
        why = f"git {args[0]} timed out after {GIT_TIMEOUT_S:.0f}s"
        raise InputError(f"cannot read git ref {ref!r}: {why}", file=str(repo)) from None
    if proc.returncode != 0:
        why = proc.stderr.decode("utf-8", "replace").strip() or f"git exited {proc.returncode}"
        raise InputError(f"cannot read git ref {ref!r}: {why}", file=str(repo))
    return proc.stdout


def files_at_ref(repo: Path, ref: str) -> dict[str, str]:
    """The files that may pin torch as they are at a git ref, by path from the repository root."""
    if not ref or ref.startswith("-"):
        raise InputError(f"cannot read git ref {ref!r}: not a ref", file=str(repo))
    listing = _git(repo, ["ls-tree", "-r", "-l", "-z", "--full-tree", ref], ref)
    files: dict[str, str] = {}
    for entry in listing.decode("utf-8", "surrogateescape").split("\0"):
        meta, _, path = entry.partition("\t")
        if not path:
            continue
        mode, kind, obj, size = meta.split()
        # Symlinks are blobs holding the target's name; submodules are commits.
        if kind != "blob" or mode == "120000" or pin_file_kind(path) is None:
            continue
        if size.isdigit() and int(size) <= MAX_FILE_BYTES:
            # By object id, so that no path is ever read as a revision or an option.
            blob = _git(repo, ["cat-file", "blob", obj], ref)
            files[path] = blob.decode("utf-8-sig", "replace")
    return files
