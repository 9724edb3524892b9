"""Torch pin-bump detection: torch pins wherever teams keep them, two git refs compared.

Read: requirements/constraints files and pyproject.toml here; lock files (uv, poetry, pdm,
Pipfile, PEP 751), conda environments, pixi manifests and locks and Dockerfiles through
suite/pin_formats.py. A lock's exact version wins over a range; files that disagree are named.

Fail closed: a pin-bearing file that changed and cannot be read, a moved range with no lock, or
files that disagree make the answer `unknown` (the matrix runs), never "no torch change". That
answer is given only when every changed pin-bearing file was read and none moved torch.

A pin becomes a side for `ab` (`torch==2.14.1`): markers are dropped because a side is one
interpreter, and the index a pin installs from is recorded beside it, not folded into it.
torchvision, torchaudio and triton are read too and reported beside torch.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name, canonicalize_version
from packaging.version import InvalidVersion, Version

from suite import pin_formats
from suite.errors import EnvironmentProblem, InputError
from suite.pin_formats import TRACKED, Found, Unreadable, tracked

if sys.version_info >= (3, 11):
    import tomllib
else:  # the same parser, from PyPI, before 3.11
    import tomli as tomllib  # type: ignore[import-not-found, unused-ignore]

GIT_TIMEOUT_S = 60.0
# Lock files of large projects run to megabytes; a pin-bearing file above this is not read,
# and when it changed the answer is `unknown`.
MAX_FILE_BYTES = 32 << 20
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
class Unknown:
    """A reason the torch pin cannot be told: a file, the side it is on, why."""

    file: str
    side: str  # "base" or "head"
    reason: str

    def as_dict(self) -> dict[str, str]:
        return {"file": self.file, "side": self.side, "reason": self.reason}


@dataclass(frozen=True)
class Tree:
    """The pin-bearing files of one side: path -> text, path -> content id, and the files that
    were not read (path -> why)."""

    texts: dict[str, str]
    ids: dict[str, str]
    unread: dict[str, str]
    kinds: dict[str, str] = field(default_factory=dict)  # format overrides, for single files


@dataclass(frozen=True)
class Assessment:
    status: str  # "changed", "unknown" or "unchanged"
    baseline: str | None  # the side `ab` takes: torch==2.13.0; None when the side has no pin
    candidate: str | None
    files: tuple[str, ...]  # files whose torch pins differ between the sides
    baseline_pin: Pin | None
    candidate_pin: Pin | None
    unknown: tuple[Unknown, ...] = ()
    disagreements: tuple[str, ...] = ()
    companions: tuple[tuple[str, str | None, str | None], ...] = ()  # (package, old, new) moved

    @property
    def run(self) -> bool:
        """Whether the matrix must run: torch moved, or it cannot be told that it did not."""
        return self.status != "unchanged"

    @property
    def message(self) -> str:
        where = ", ".join(self.files)
        if self.status == "unknown":
            why = "; ".join(f"{u.file} ({u.side}): {u.reason}" for u in self.unknown)
            text = f"torch pin unknown: {why}"
        elif self.status == "unchanged":
            text = "no torch change"
        elif self.baseline is None:
            text = f"torch pin added: {self.candidate} (no baseline pin) in {where}"
        elif self.candidate is None:
            text = f"torch pin removed: {self.baseline} (no candidate pin) in {where}"
        else:
            text = f"torch pin changed: {self.baseline} -> {self.candidate} in {where}"
        moved = [
            f"{old or f'no {pkg}'} -> {new or f'no {pkg}'}" for pkg, old, new in self.companions
        ]
        return text + (f"; also {', '.join(moved)}" if moved else "")


# The old name of an assessment that moved torch.
Bump = Assessment


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
        pin = _make_pin(file, f.line, req, f.index_url, kind=f.kind)
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
        return _from_found(path, pin_formats.read_dockerfile(text, _requirement_word))
    reader = _READERS.get(kind or "")
    return _from_found(path, reader(text)) if reader else []


def read_tree(tree: Tree) -> tuple[list[Pin], dict[str, str]]:
    """Every tracked pin of a side, and the files that could not be read (path -> why)."""
    pins: list[Pin] = []
    unreadable = dict(tree.unread)
    for path in sorted(tree.texts):
        try:
            pins += pins_in_file(path, tree.texts[path], kind=tree.kinds.get(path))
        except Unreadable as exc:
            unreadable[path] = str(exc)
    return pins, unreadable


def find_torch_pins(files: Mapping[str, str]) -> list[Pin]:
    """Tracked pins in every file that may hold one, in path order; other files are ignored.
    A file that cannot be read raises InputError naming it."""
    pins = []
    for path in sorted(files):
        try:
            pins += pins_in_file(path, files[path])
        except Unreadable as exc:
            raise InputError(str(exc), file=path) from None
    return pins


def _public(pin: Pin) -> str:
    return pin.key.split("+", 1)[0]


def _describe(pin: Pin) -> str:
    return f"{pin.file}:{pin.line} has {pin.side!r}"


def effective_pin(pins: Sequence[Pin], package: str = "torch") -> tuple[Pin | None, list[str]]:
    """The one version of a package a side installs, and how its files disagree.

    A lock's exact version wins over a manifest's; an exact pin wins over a range (a lock
    beside a range in pyproject.toml). Variants of one version in one lock (+cpu, +cu128 for
    different platforms) are one version.
    """
    own = [p for p in pins if p.package == package]
    exact = [p for p in own if p.exact]
    chosen = [p for p in exact if p.kind == "lock"] or exact or own
    if not chosen:
        return None, []
    first, problems = chosen[0], []
    for other in exact:
        same_file = other.file == first.file and _public(other) == _public(first)
        if other.key != first.key and not same_file:
            problems.append(f"{_describe(first)} but {_describe(other)}")
    if first.exact and first.version is not None:
        for other in own:
            admits = (
                other.exact
                or other.url
                or SpecifierSet(other.specifier).contains(first.version, prereleases=True)
            )
            if not admits:
                problems.append(
                    f"{_describe(other)}, which excludes {first.side} from {first.file}"
                )
    elif not first.exact:
        for other in own[1:]:
            if other.key != first.key:
                problems.append(f"{_describe(first)} but {_describe(other)}")
    return first, problems


def _keys_by_file(pins: Sequence[Pin], package: str) -> dict[str, set[str]]:
    by_file: dict[str, set[str]] = {}
    for pin in pins:
        if pin.package == package:
            by_file.setdefault(pin.file, set()).add(pin.key)
    return by_file


def assess(base: Tree, head: Tree) -> Assessment:
    """Did the change move torch (and what moved with it), or can that not be told?"""
    changed = {p for p in base.ids.keys() | head.ids.keys() if base.ids.get(p) != head.ids.get(p)}
    base_pins, base_bad = read_tree(base)
    head_pins, head_bad = read_tree(head)
    unknown = [
        Unknown(path, side, reason)
        for side, bad in (("base", base_bad), ("head", head_bad))
        for path, reason in sorted(bad.items())
        if path in changed
    ]
    old, old_problems = effective_pin(base_pins, "torch")
    new, new_problems = effective_pin(head_pins, "torch")
    a, b = _keys_by_file(base_pins, "torch"), _keys_by_file(head_pins, "torch")
    files = tuple(sorted(f for f in a.keys() | b.keys() if a.get(f) != b.get(f)))
    moved = (old.key if old else None) != (new.key if new else None)
    disagreements = [f"base: {p}" for p in old_problems] + [f"head: {p}" for p in new_problems]
    if files:
        # A torch pin changed somewhere: what the side installs must be clear on both sides.
        unknown += [Unknown(f, "base", p) for p in old_problems for f in files[:1]]
        unknown += [Unknown(f, "head", p) for p in new_problems for f in files[:1]]
    if moved:
        for side, pin in (("base", old), ("head", new)):
            if pin is not None and not pin.exact:
                unknown.append(
                    Unknown(
                        pin.file,
                        side,
                        f"{pin.side!r} is a range with no lock: which torch installs depends on "
                        "the index on the day",
                    )
                )
    companions = []
    for package in TRACKED[1:]:
        was, _ = effective_pin(base_pins, package)
        now, _ = effective_pin(head_pins, package)
        if (was.key if was else None) != (now.key if now else None):
            companions.append((package, was.side if was else None, now.side if now else None))
    status = "unknown" if unknown else "changed" if moved else "unchanged"
    return Assessment(
        status=status,
        baseline=old.side if old else None,
        candidate=new.side if new else None,
        files=files,
        baseline_pin=old,
        candidate_pin=new,
        unknown=tuple(unknown),
        disagreements=tuple(disagreements),
        companions=tuple(companions),
    )


def tree_of(files: Mapping[str, str], kinds: Mapping[str, str] | None = None) -> Tree:
    """A Tree of texts held in memory (path -> text)."""
    import hashlib

    ids = {
        p: hashlib.sha256(t.encode("utf-8", "surrogateescape")).hexdigest()
        for p, t in files.items()
    }
    return Tree(dict(files), ids, {}, dict(kinds or {}))


def detect_bump(base: Mapping[str, str], head: Mapping[str, str]) -> Assessment | None:
    """The assessment of two trees (path -> text); None when no torch pin changed and every
    changed file was read."""
    result = assess(tree_of(base), tree_of(head))
    return None if result.status == "unchanged" else result


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


def tree_at_ref(repo: Path, ref: str) -> Tree:
    """The files that may pin torch as they are at a git ref, by path from the repository root."""
    if not ref or ref.startswith("-"):
        raise InputError(f"cannot read git ref {ref!r}: not a ref", file=str(repo))
    listing = _git(repo, ["ls-tree", "-r", "-l", "-z", "--full-tree", ref], ref)
    texts: dict[str, str] = {}
    ids: dict[str, str] = {}
    unread: dict[str, str] = {}
    for entry in listing.decode("utf-8", "surrogateescape").split("\0"):
        meta, _, path = entry.partition("\t")
        if not path:
            continue
        mode, kind, obj, size = meta.split()
        # Symlinks are blobs holding the target's name; submodules are commits.
        if kind != "blob" or mode == "120000" or pin_file_kind(path) is None:
            continue
        ids[path] = obj
        if size.isdigit() and int(size) > MAX_FILE_BYTES:
            unread[path] = f"{int(size) >> 20} MiB, above the {MAX_FILE_BYTES >> 20} MiB read limit"
            continue
        # By object id, so that no path is ever read as a revision or an option.
        blob = _git(repo, ["cat-file", "blob", obj], ref)
        texts[path] = blob.decode("utf-8-sig", "replace")
    return Tree(texts, ids, unread)


def files_at_ref(repo: Path, ref: str) -> dict[str, str]:
    """The texts of the files that may pin torch at a git ref (see tree_at_ref)."""
    return tree_at_ref(repo, ref).texts
