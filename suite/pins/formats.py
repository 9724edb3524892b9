"""Readers for the files, beyond requirements and pyproject.toml, in which teams pin torch: lock
files (uv, poetry, pdm, Pipfile, PEP 751 pylock), conda environments, pixi manifests and locks,
and Dockerfiles. Each is parsed with a kept parser (tomllib, json, PyYAML, packaging); none by
regular expression over the whole text.

A reader returns the pins it found as (package, requirement text, line, where) tuples, or
raises Unreadable with the reason when the file cannot be read as its format: the caller fails
closed on a changed file it cannot read.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

from packaging.utils import canonicalize_name

from suite.core.yamlsafe import YamlProblem, load_yaml

if sys.version_info >= (3, 11):
    import tomllib
else:  # the same parser, from PyPI, before 3.11
    import tomli as tomllib  # type: ignore[import-not-found, unused-ignore]

# torch and the packages that move with it. conda-forge calls torch `pytorch`.
TRACKED = ("torch", "torchvision", "torchaudio", "triton")
_ALIASES = {"pytorch": "torch", "pytorch-cpu": "torch", "pytorch-gpu": "torch"}
_ALIASES |= {"pytorch-triton": "triton"}
# pixi.lock format versions this reader knows; pylock.toml lock-version majors.
PIXI_LOCK_VERSIONS = (4, 5, 6)
PYLOCK_MAJOR = 1


class Unreadable(Exception):
    """A pin-bearing file that cannot be read as its format; the message says why."""


@dataclass(frozen=True)
class Found:
    package: str  # canonical: torch, torchvision, torchaudio, triton
    requirement: str  # PEP 508 text: "torch==2.13.0"
    line: int  # 1-based; 1 where the format keeps no positions we can map
    where: str  # a path inside the file: "$.package[3]", "line 4", "FROM"
    kind: str  # "lock" (one resolved version) or "manifest" (a requirement)
    index_url: str | None = None
    image: str | None = None  # a Dockerfile's FROM image that holds this torch
    # The part of its file the pin belongs to, where a file holds several environments: a
    # Dockerfile's build stage, a workflow's job. None: the file is one.
    part: str | None = None


def tracked(name: str) -> str | None:
    """The canonical tracked name of a package name, or None."""
    canon: str = canonicalize_name(name)
    canon = _ALIASES.get(canon, canon)
    return canon if canon in TRACKED else None


def format_of(path: str) -> str | None:
    """The format a file name says the file is in, for the formats this module reads."""
    name = PurePosixPath(path).name
    lower = name.lower()
    # A GitHub Actions workflow, or a composite action anywhere under .github/ (before the conda
    # names: a YAML file in .github/workflows/ is a workflow whatever its name).
    folders = [part.lower() for part in PurePosixPath(path).parts[:-1]]
    in_github = lower.endswith((".yml", ".yaml")) and folders[:1] == [".github"]
    if in_github and (folders[1:] == ["workflows"] or lower in ("action.yml", "action.yaml")):
        return "workflow"
    if lower in ("uv.lock", "poetry.lock", "pdm.lock"):
        return lower.removesuffix(".lock") + "-lock"
    if lower == "pipfile.lock":
        return "pipfile-lock"
    if lower == "pylock.toml" or (lower.startswith("pylock.") and lower.endswith(".toml")):
        return "pylock"
    if lower == "pixi.toml":
        return "pixi-manifest"
    if lower == "pixi.lock":
        return "pixi-lock"
    if lower.endswith((".yml", ".yaml")) and lower.rsplit(".", 1)[0] in ("environment", "env"):
        return "conda"
    if lower.endswith((".yml", ".yaml")) and lower.startswith("environment"):
        return "conda"
    # Any name that says it is one: Dockerfile, Dockerfile.cuda, Dockerfile_intel, rocm.dockerfile,
    # Containerfile-amd; not its documentation (Dockerfile.md) or ignore file.
    if ("dockerfile" in lower or "containerfile" in lower) and not lower.endswith(
        (".md", ".rst", ".txt", ".dockerignore", ".containerignore", ".j2", ".tmpl", ".template")
    ):
        return "dockerfile"
    return None


def _line_of(text: str, *needles: str) -> int:
    """The first line holding every needle: a position for formats whose parser keeps none."""
    for number, line in enumerate(text.splitlines(), 1):
        if all(n in line for n in needles):
            return number
    return 1


def _toml(text: str) -> dict[str, Any]:
    try:
        doc: dict[str, Any] = tomllib.loads(text)
        return doc
    except tomllib.TOMLDecodeError as exc:
        raise Unreadable(f"not valid TOML: {exc}") from None


def _packages(doc: dict[str, Any], key: str) -> list[dict[str, Any]]:
    items = doc.get(key, [])
    if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
        raise Unreadable(f"`{key}` is not an array of tables")
    return items


def _locked(text: str, doc: dict[str, Any], key: str) -> Iterator[Found]:
    """[[package]] tables with name and version: uv, poetry, pdm, pylock."""
    for i, pkg in enumerate(_packages(doc, key)):
        name = pkg.get("name")
        package = tracked(name) if isinstance(name, str) else None
        if package is None:
            continue
        version = pkg.get("version")
        if not isinstance(version, str) or not version:
            raise Unreadable(f"{key}[{i}] ({name}) has no version")
        source = pkg.get("source")
        index = pkg.get("index")  # pylock.toml
        if isinstance(source, dict):
            index = source.get("registry") or source.get("url")  # uv.lock, poetry.lock
        yield Found(
            package,
            f"{package}=={version}",
            _line_of(text, f'"{version}"') if package == "torch" else 1,
            f"$.{key}[{i}]",
            "lock",
            index if isinstance(index, str) else None,
        )


def _table_lock(key: str, what: str) -> Callable[[str], list[Found]]:
    """A reader of a TOML lock of [[package]] tables, recognised by a top-level key."""

    def read(text: str) -> list[Found]:
        doc = _toml(text)
        if key not in doc:
            raise Unreadable(f"no `{key}` at the top: not a {what}")
        return list(_locked(text, doc, "package"))

    return read


read_uv_lock = _table_lock("version", "uv.lock")
read_poetry_lock = _table_lock("metadata", "poetry.lock")
read_pdm_lock = _table_lock("metadata", "pdm.lock")


def read_pylock(text: str) -> list[Found]:
    doc = _toml(text)
    version = doc.get("lock-version")
    if not isinstance(version, str) or not version.split(".")[0].isdigit():
        raise Unreadable("no `lock-version`: not a PEP 751 lock")
    if int(version.split(".")[0]) != PYLOCK_MAJOR:
        raise Unreadable(f"lock-version {version} is not one this reader knows (1.x)")
    return list(_locked(text, doc, "packages"))


def read_pipfile_lock(text: str) -> list[Found]:
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise Unreadable(f"not valid JSON: {exc}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("_meta"), dict):
        raise Unreadable("no `_meta` object: not a Pipfile.lock")
    sources = {s.get("name"): s.get("url") for s in doc["_meta"].get("sources") or []}
    found = []
    for section in ("default", "develop"):
        deps = doc.get(section) or {}
        if not isinstance(deps, dict):
            raise Unreadable(f"`{section}` is not an object")
        for name, dep in deps.items():
            package = tracked(name)
            if package is None:
                continue
            version = dep.get("version") if isinstance(dep, dict) else None
            if not isinstance(version, str) or not version.startswith("=="):
                raise Unreadable(f"$.{section}.{name} has no ==version")
            index = sources.get(dep.get("index"))
            line = _line_of(text, f'"{version}"')
            found.append(
                Found(package, f"{package}{version}", line, f"$.{section}.{name}", "lock", index)
            )
    return found


def _conda_version(version: str) -> str:
    """conda's fuzzy `=2.13.0` / `2.13.0` as PEP 440: a full release is that release; a
    shorter one (2.13) or a star is every release under it."""
    version = version.rstrip("*").rstrip(".")
    if version.count(".") >= 2:
        return f"=={version}"
    return f"=={version}.*"


def _conda_spec(spec: str) -> tuple[str, str]:
    """(name, PEP 440 specifier) of a conda match spec: `pytorch=2.13.0=cpu*`,
    `pytorch 2.13.0 cpu_*`, `pytorch==2.13.0`, `conda-forge::pytorch>=2.13,<2.15`."""
    spec = spec.split("::", 1)[-1].strip()
    end = next((i for i, ch in enumerate(spec) if ch in " =<>!~["), len(spec))
    name, rest = spec[:end], spec[end:].strip()
    if not rest:
        return name, ""
    if rest.startswith("["):
        raise Unreadable(f"{spec!r}: bracketed match specs are not read")
    if rest.startswith("=="):
        return name, f"=={rest[2:].split('=', 1)[0].split()[0]}"
    if rest.startswith("="):
        return name, _conda_version(rest[1:].split("=", 1)[0].split()[0])
    if rest[0].isdigit():
        version = rest.split()[0]
        return name, _conda_version(version) if version.endswith("*") else f"=={version}"
    return name, rest.split()[0]


def _conda_found(spec: str, text: str, where: str) -> Found | None:
    name, specifier = _conda_spec(spec)
    package = tracked(name)
    if package is None:
        return None
    return Found(package, f"{package}{specifier}", _line_of(text, name), where, "manifest")


def _yaml(text: str) -> Any:
    """A YAML pin file, bounded (suite.core.yamlsafe): an alias bomb or a repeated key in a pull
    request's file is a file that cannot be read, so the answer is `unknown`."""
    try:
        return load_yaml(text)
    except YamlProblem as exc:
        raise Unreadable(f"not valid YAML: {exc}") from None


def read_conda(text: str, pip_reader: Callable[[str], list[Found]]) -> list[Found]:
    """A conda environment file: `dependencies:` match specs and their `pip:` list."""
    doc = _yaml(text)
    if not isinstance(doc, dict):
        raise Unreadable("not a mapping: not a conda environment file")
    deps = doc.get("dependencies") or []
    if not isinstance(deps, list):
        raise Unreadable("`dependencies` is not a list")
    found = []
    for i, dep in enumerate(deps):
        if isinstance(dep, str):
            item = _conda_found(dep, text, f"$.dependencies[{i}]")
            found += [item] if item else []
        elif isinstance(dep, dict) and isinstance(dep.get("pip"), list):
            lines = "\n".join(str(p) for p in dep["pip"])
            found += [
                Found(
                    f.package,
                    f.requirement,
                    _line_of(text, f.requirement),
                    f"$.dependencies[{i}].pip",
                    "manifest",
                    f.index_url,
                )
                for f in pip_reader(lines)
            ]
    return found


def _pixi_requirement(package: str, value: Any, conda: bool) -> str:
    version = value.get("version") if isinstance(value, dict) else value
    if not isinstance(version, str) or version.strip() in ("", "*"):
        return package
    version = version.strip()
    if version[:1].isdigit():
        version = f"=={version}"
    elif conda and version.startswith("=") and not version.startswith("=="):
        version = f"={version}"
    return f"{package}{version}"


def read_pixi_manifest(text: str) -> list[Found]:
    """pixi.toml: [dependencies] (conda) and [pypi-dependencies], in features and targets too."""
    doc = _toml(text)
    tables: list[tuple[str, Any, bool]] = []

    def collect(prefix: str, table: Any) -> None:
        if not isinstance(table, dict):
            return
        tables.append((f"{prefix}dependencies", table.get("dependencies"), True))
        tables.append((f"{prefix}pypi-dependencies", table.get("pypi-dependencies"), False))
        for target, body in (table.get("target") or {}).items():
            collect(f"{prefix}target.{target}.", body)

    collect("$.", doc)
    for feature, body in (doc.get("feature") or {}).items():
        collect(f"$.feature.{feature}.", body)
    found = []
    for where, deps, conda in tables:
        for name, value in (deps or {}).items() if isinstance(deps, dict) else ():
            package = tracked(name)
            if package is not None:
                requirement = _pixi_requirement(package, value, conda)
                found.append(
                    Found(package, requirement, _line_of(text, name), f"{where}.{name}", "manifest")
                )
    return found


def _from_url(url: str) -> tuple[str, str] | None:
    """(name, version) from a conda package or wheel file name at the end of a URL."""
    file = url.rsplit("/", 1)[-1]
    if file.endswith(".whl"):
        parts = file.split("-")
        return (parts[0], parts[1]) if len(parts) >= 5 else None
    for suffix in (".conda", ".tar.bz2"):
        if file.endswith(suffix):
            parts = file.removesuffix(suffix).rsplit("-", 2)
            return (parts[0], parts[1]) if len(parts) == 3 else None
    return None


def read_pixi_lock(text: str) -> list[Found]:
    doc = _yaml(text)
    if not isinstance(doc, dict) or "version" not in doc:
        raise Unreadable("no `version` key: not a pixi.lock")
    if doc["version"] not in PIXI_LOCK_VERSIONS:
        known = ", ".join(map(str, PIXI_LOCK_VERSIONS))
        raise Unreadable(
            f"lock format version {doc['version']} is not one this reader knows ({known})"
        )
    packages = doc.get("packages") or []
    if not isinstance(packages, list):
        raise Unreadable("`packages` is not a list")
    found = []
    for i, pkg in enumerate(packages):
        if not isinstance(pkg, dict):
            raise Unreadable(f"$.packages[{i}] is not a mapping")
        url = pkg.get("conda") or pkg.get("pypi")
        name, version = pkg.get("name"), pkg.get("version")
        if (not name or not version) and isinstance(url, str):
            name, version = _from_url(url) or (name, version)
        package = tracked(str(name)) if name else None
        if package is None:
            continue
        if not version:
            raise Unreadable(f"$.packages[{i}] ({name}) has no version")
        needle = str(url).rsplit("/", 1)[-1] if url else str(version)
        found.append(
            Found(
                package, f"{package}=={version}", _line_of(text, needle), f"$.packages[{i}]", "lock"
            )
        )
    return found


# Dockerfiles ------------------------------------------------------------------------------
