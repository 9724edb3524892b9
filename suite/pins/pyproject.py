"""The tracked pins of a pyproject.toml: PEP 621 dependencies, optional dependencies and
dependency groups, poetry's dependency tables, and where [tool.uv.sources] and poetry install a
package from instead of an index (git at a tag, rev or branch; a URL)."""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from suite.pins.formats import Unreadable, tracked
from suite.pins.requirement import Pin, make_pin, parse_tracked

if sys.version_info >= (3, 11):
    import tomllib
else:  # the same parser, from PyPI, before 3.11
    import tomli as tomllib  # type: ignore[import-not-found, unused-ignore]

_ANY_TORCH = re.compile(r"\btorch\b", re.IGNORECASE)
# Source keys that say where a package comes from other than an index or a URL: a local
# checkout or workspace member, whose torch version cannot be read from the manifest.
_LOCAL_SOURCES = ("path", "workspace", "editable")


@dataclass(frozen=True)
class _Found:
    """A requirement found in pyproject.toml: TOML path, text, its line's pattern, index URL."""

    where: str
    text: str
    pattern: re.Pattern[str]
    index_url: str | None


@dataclass(frozen=True)
class _Direct:
    """A [tool.uv.sources] entry that installs a package from git or a URL, not an index."""

    url: str
    marker: str | None


def _table(doc: Any, *keys: str) -> dict[str, Any]:
    for key in keys:
        doc = doc.get(key) if isinstance(doc, dict) else None
    return doc if isinstance(doc, dict) else {}


def _git_url(source: Mapping[str, Any]) -> str | None:
    """A PEP 508 URL of a git source (poetry's or uv's): git+URL@tag#subdirectory=..."""
    git = source.get("git")
    if not isinstance(git, str):
        return None
    url = git if git.startswith("git+") else f"git+{git}"
    ref = next((source[k] for k in ("tag", "rev", "branch") if isinstance(source.get(k), str)), "")
    url += f"@{ref}" if ref else ""
    sub = source.get("subdirectory")
    return url + (f"#subdirectory={sub}" if isinstance(sub, str) else "")


def _source_url(source: Mapping[str, Any], where: str) -> str | None:
    """The URL a dependency's source installs from; None for an index (or no source). Raises
    Unreadable for a local source, which names no version that can be compared."""
    local = next((k for k in _LOCAL_SOURCES if k in source), None)
    if local is not None:
        raise Unreadable(
            f"{where}: installs from a {local} source ({source[local]!r}): which version it "
            "builds cannot be told from the manifest"
        )
    url = source.get("url")
    return url if isinstance(url, str) else _git_url(source)


def _poetry_spec(value: str, path: str) -> str:
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


def _poetry_requirement(name: str, value: Any, sources: Mapping[Any, Any], path: str) -> _Found:
    dep = value if isinstance(value, dict) else {"version": value}
    extras = dep.get("extras") or []
    req = name + (f"[{','.join(map(str, extras))}]" if extras else "")
    url = _source_url(dep, path)
    if url is not None:
        req += f" @ {url}"
    elif isinstance(dep.get("version"), str):
        req += _poetry_spec(dep["version"], path)
    if isinstance(dep.get("markers"), str):
        req += f"; {dep['markers']}"
    pattern = re.compile(
        rf'^\s*(?:"{re.escape(name)}"|{re.escape(name)})\s*=|\.{re.escape(name)}\]\s*$', re.I
    )
    return _Found(path, req, pattern, sources.get(dep.get("source")))


def _poetry_requirements(doc: dict[str, Any]) -> list[_Found]:
    poetry = _table(doc, "tool", "poetry")
    sources = {s.get("name"): s.get("url") for s in poetry.get("source", []) if isinstance(s, dict)}
    tables = {f"$.tool.poetry.{k}": poetry.get(k) for k in ("dependencies", "dev-dependencies")}
    for group, table in _table(poetry, "group").items():
        tables[f"$.tool.poetry.group.{group}.dependencies"] = _table(table, "dependencies")
    found: list[_Found] = []
    for path, deps in tables.items():
        for name, value in deps.items() if isinstance(deps, dict) else ():
            for dep in value if isinstance(value, list) else [value]:
                if tracked(name) == canonicalize_name(name):
                    found.append(_poetry_requirement(name, dep, sources, f"{path}.{name}"))
    return found


def _pep621_requirements(doc: dict[str, Any]) -> list[_Found]:
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
                found.append(_Found(f"{path}[{i}]", item, pattern, uv_urls.get(uv_index)))
    return found


def _uv_direct_sources(doc: dict[str, Any]) -> dict[str, tuple[list[_Direct], bool]]:
    """Tracked package -> the git/URL sources [tool.uv.sources] gives it, and whether an index
    source stands beside them (for other platforms); packages from an index only are left out."""
    out: dict[str, tuple[list[_Direct], bool]] = {}
    for name, value in _table(doc, "tool", "uv", "sources").items():
        package = tracked(name)
        if package is None or package != canonicalize_name(name):
            continue
        entries = value if isinstance(value, list) else [value]
        direct, indexed = [], False
        for n, entry in enumerate(e for e in entries if isinstance(e, dict)):
            where = f"$.tool.uv.sources.{name}" + (f"[{n}]" if isinstance(value, list) else "")
            url = _source_url(entry, where)
            if url is None:
                indexed = True
                continue
            marker = entry.get("marker")
            direct.append(_Direct(url, marker if isinstance(marker, str) else None))
        if direct:
            out[package] = (direct, indexed)
    return out


def _as_sourced(req: Requirement, sources: Mapping[str, tuple[list[_Direct], bool]]) -> list[str]:
    """The requirements uv installs for one PEP 621 requirement: from its git/URL sources when
    [tool.uv.sources] names them (the version in the requirement then only checks the build),
    and the requirement itself where an index source stands beside them."""
    package = tracked(req.name)
    if package is None or package not in sources:
        return [str(req)]
    direct, indexed = sources[package]
    extras = f"[{','.join(sorted(req.extras))}]" if req.extras else ""
    out = [str(req)] if indexed else []
    for d in direct:
        both = (str(req.marker) if req.marker else "", d.marker)
        markers = " and ".join(f"({m})" for m in both if m)
        out.append(f"{req.name}{extras} @ {d.url}" + (f"; {markers}" if markers else ""))
    return out


def _pins(
    file: str,
    text: str,
    found: list[_Found],
    sources: Mapping[str, tuple[list[_Direct], bool]],
    taken: set[int],
) -> list[Pin]:
    lines, pins = text.splitlines(), []
    for item in found:
        req = parse_tracked(item.text, item.where)
        if req is None:
            continue
        # tomllib keeps no positions: the first matching line not yet given to another pin.
        exact = [n for n, s in enumerate(lines, 1) if item.pattern.search(s)]
        loose = [n for n, s in enumerate(lines, 1) if _ANY_TORCH.search(s)]
        line = next((n for n in exact + loose if n not in taken), (exact + loose + [1])[0])
        taken.add(line)
        for one in [req] if req.url else [Requirement(t) for t in _as_sourced(req, sources)]:
            pin = make_pin(file, line, one, item.index_url)
            pins += [pin] if pin else []
    return pins


def pyproject_pins(file: str, text: str) -> list[Pin]:
    """Tracked pins of a pyproject.toml. Raises Unreadable."""
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise Unreadable(f"not valid TOML: {exc}") from None
    taken: set[int] = set()
    # [tool.uv.sources] applies to the PEP 621 tables, which uv reads; poetry names its own.
    pep621 = _pins(file, text, _pep621_requirements(doc), _uv_direct_sources(doc), taken)
    return pep621 + _pins(file, text, _poetry_requirements(doc), {}, taken)
