"""Schema loading and validation for every file the suite writes or reads.

Schemas live in the top-level ``schemas/`` folder, which is installed as the
``suite.schemas`` package, and are loaded through ``importlib.resources``.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Callable, Mapping
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema
from referencing import Registry, Resource

from suite.core.backends import backend_names, image_backends
from suite.core.errors import InputError, SchemaErrors, SchemaVersionError
from suite.core.yamlsafe import YamlProblem, load_yaml

# kind -> (schema file, supported versions)
KINDS: dict[str, tuple[str, tuple[int, ...]]] = {
    "torch-matrix/matrix": ("matrix.schema.json", (1,)),
    "torch-matrix/result": ("result.schema.json", (1,)),
    "torch-matrix/run": ("run.schema.json", (1,)),
    "torch-matrix/environment": ("environment.schema.json", (1,)),
    "torch-matrix/policy": ("policy.schema.json", (1,)),
    "torch-matrix/decision": ("decision.schema.json", (1,)),
    "torch-matrix/calibration": ("calibration.schema.json", (1,)),
    "torch-matrix/image": ("image.schema.json", (1,)),
}
# Files whose format version sits in 'version' (hand-written files) rather than 'schema_version'.
VERSION_KEYED = ("torch-matrix/matrix", "torch-matrix/policy")


def _schema_text(name: str) -> str:
    try:
        return resources.files("suite.schemas").joinpath(name).read_text(encoding="utf-8")
    except (ModuleNotFoundError, FileNotFoundError):
        # A source checkout that was never installed: read the folder directly.
        return (Path(__file__).resolve().parents[2] / "schemas" / name).read_text("utf-8")


# A schema node marked "x-registry": NAME lists that registry's names (its `enum`, or the
# `required` keys of an object keyed by them), filled in when the schema is loaded so that a
# registered backend is valid everywhere; the files list the built-in names, for tools that
# read them directly (tests/test_registries.py holds the two equal).
REGISTRIES: dict[str, Callable[[], tuple[str, ...]]] = {
    "backends": backend_names,
    "image-backends": image_backends,
}


def _fill_registries(node: Any) -> None:
    if isinstance(node, dict):
        names = REGISTRIES[node["x-registry"]]() if "x-registry" in node else None
        if names is not None:
            node["enum" if "enum" in node else "required"] = list(names)
        for value in node.values():
            _fill_registries(value)
    elif isinstance(node, list):
        for value in node:
            _fill_registries(value)


def schema_file(name: str) -> dict[str, Any]:
    """A schema as its file has it."""
    loaded: dict[str, Any] = json.loads(_schema_text(name))
    return loaded


def schema(name: str) -> dict[str, Any]:
    """A schema with the registries' names as they are now."""
    return _loaded(name, _registry_state())


def _registry_state() -> tuple[tuple[str, ...], ...]:
    return tuple(names() for names in REGISTRIES.values())


@functools.cache
def _loaded(name: str, _state: tuple[tuple[str, ...], ...]) -> dict[str, Any]:
    loaded = schema_file(name)
    _fill_registries(loaded)
    return loaded


def _registry() -> Registry:
    return _schemas(_registry_state())


@functools.cache
def _schemas(state: tuple[tuple[str, ...], ...]) -> Registry:
    registry: Registry = Registry()
    for file_name, _ in KINDS.values():
        contents = _loaded(file_name, state)
        registry = registry.with_resource(contents["$id"], Resource.from_contents(contents))
    return registry


def json_path(parts: Any) -> str:
    path = "$"
    for part in parts:
        path += f"[{part}]" if isinstance(part, int) else f".{part}"
    return path


def detect_kind(doc: Mapping[str, Any]) -> str | None:
    kind = doc.get("kind")
    if isinstance(kind, str):
        return kind
    if "profiles" in doc:
        return "torch-matrix/policy"
    if "workloads" in doc or "version" in doc:
        return "torch-matrix/matrix"
    return None


def validate(doc: Any, kind: str, *, file: str) -> None:
    """Raise SchemaErrors naming the file and the JSON path of every problem, the most
    relevant first."""
    if not isinstance(doc, dict):
        raise InputError(f"expected an object, found {type(doc).__name__}", file=file, path="$")
    schema_file, versions = KINDS[kind]
    version_key = "version" if kind in VERSION_KEYED else "schema_version"
    found = doc.get(version_key)
    if found is not None and found not in versions:
        newest = max(versions)
        fix = (
            f"upgrade torch-matrix to read version {found}"
            if isinstance(found, int) and found > newest
            else f"re-create the file with this torch-matrix (writes version {newest})"
        )
        raise SchemaVersionError(
            f"{kind} version {found!r} is not supported (this torch-matrix reads "
            f"{', '.join(map(str, versions))}); {fix}",
            file=file,
            path=f"$.{version_key}",
        )
    validator = jsonschema.Draft202012Validator(schema(schema_file), registry=_registry())
    errors = sorted(validator.iter_errors(doc), key=lambda e: (len(e.absolute_path), str(e.path)))
    if errors:
        best = jsonschema.exceptions.best_match(errors)
        rest = [e for e in errors if e is not best]
        problems = [(json_path(e.absolute_path), e.message) for e in [best, *rest]]
        raise SchemaErrors(problems, file=file)


# No file the suite reads is near this; a file above it is refused unread, naming it.
MAX_DOCUMENT_BYTES = 64 << 20
# Matrices and policies are written by hand (and come from pull requests): far smaller.
MAX_SPEC_BYTES = 1 << 20


def read_capped(path: Path, limit: int = MAX_DOCUMENT_BYTES) -> bytes:
    """A file's bytes, refused (InputError naming it) when above limit or unreadable."""
    try:
        with open(path, "rb") as fh:
            raw = fh.read(limit + 1)
    except FileNotFoundError:
        raise InputError("file not found", file=str(path)) from None
    except OSError as exc:
        raise InputError(f"cannot read file: {exc}", file=str(path)) from None
    if len(raw) > limit:
        raise InputError(
            f"larger than the {limit:,} bytes this kind of file may have; refused unread",
            file=str(path),
        )
    return raw


def _no_repeats(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    doc: dict[str, Any] = {}
    for key, value in pairs:
        if key in doc:
            raise ValueError(f"key {key!r} appears twice in one object")
        doc[key] = value
    return doc


def parse_document(raw: bytes, path: Path) -> Any:
    """JSON or YAML (by the file's suffix) from its bytes, raising InputError (never a
    traceback) on bad syntax, a repeated key, or YAML that expands beyond its limit."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"cannot read file: {exc}", file=str(path)) from None
    if path.suffix in (".yaml", ".yml"):
        try:
            return load_yaml(text)
        except YamlProblem as exc:
            raise InputError(str(exc), file=str(path)) from None
    try:
        return json.loads(text, object_pairs_hook=_no_repeats)
    except json.JSONDecodeError as exc:
        raise InputError(
            f"invalid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}", file=str(path)
        ) from None
    except ValueError as exc:
        raise InputError(str(exc), file=str(path)) from None


def load_document(path: Path, limit: int = MAX_DOCUMENT_BYTES) -> Any:
    """Read a JSON or YAML file of at most limit bytes (see parse_document)."""
    return parse_document(read_capped(path, limit), path)


def load_spec_document(path: Path) -> tuple[Any, str]:
    """A hand-written file (matrix, policy): its document and the sha256 of the very bytes it
    was parsed from, read once."""
    raw = read_capped(path, MAX_SPEC_BYTES)
    return parse_document(raw, path), hashlib.sha256(raw).hexdigest()


def validate_file(path: Path, kind: str | None = None) -> str:
    """Validate one file; return its kind."""
    doc = load_document(path)
    if not isinstance(doc, dict):
        raise InputError("expected an object at the top level", file=str(path), path="$")
    found = kind or detect_kind(doc)
    if found is None:
        raise InputError(
            "cannot tell what kind of file this is: no 'kind' field and not a matrix file",
            file=str(path),
            path="$.kind",
        )
    if found not in KINDS:
        raise InputError(
            f"unknown kind {found!r}; expected one of {', '.join(sorted(KINDS))}",
            file=str(path),
            path="$.kind",
        )
    validate(doc, found, file=str(path))
    return found
