"""Matrix files: load, validate, and expand into the list of cells to run."""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import Any

from suite.core.backends import backend_names
from suite.core.errors import InputError, WorkloadError, warn
from suite.core.records import SIZES, MatrixEvidence, Size
from suite.core.spec import CellSpec
from suite.core.validation import load_spec_document, validate
from suite.core.yamlsafe import load_yaml
from suite.workloads import Resolved, file_part, resolve
from suite.workloads.base import ParamValue

DEFAULT_MATRIX_NAME = "<built-in default matrix>"
DEFAULT_TIMEOUT_S = 600.0


@dataclass(frozen=True)
class Entry:
    ref: str
    lane: str
    grid: dict[str, list[ParamValue]]
    backends: tuple[str, ...] | None
    timeout_s: float | None
    index: int | None  # position in the file; None for entries added on the command line
    # A distributed workload's worlds: (nodes, ranks per node) pairs; empty: its default.
    world: tuple[tuple[int, int], ...] = ()


@dataclass
class Matrix:
    name: str
    file: str
    sha256: str
    profile: Size
    backends: tuple[str, ...]
    timeout_s: float
    entries: list[Entry]
    runners: dict[str, list[str]] = field(default_factory=dict)
    # Backend -> the environment whose torch its jobs install (`pins` names them: a Dockerfile,
    # a Dockerfile's stage, a folder's pin files): `pin-source:` in the file.
    pin_sources: dict[str, str] = field(default_factory=dict)
    # Packages the workloads need beside torch (transformers==5.25.0): installed into every
    # venv side as --with is; an image side must be built with them (`requirements:`).
    requirements: tuple[str, ...] = ()
    # Where a distributed cell's nodes run (`launcher:`): None is every node on this host.
    launcher: dict[str, Any] | None = None
    launcher_where: dict[str, str] = field(default_factory=dict)  # for its errors

    def evidence(self) -> MatrixEvidence:
        return {"file": self.file, "sha256": self.sha256, "name": self.name}


def default_matrix_text() -> str:
    return resources.files("suite.data").joinpath("default-matrix.yaml").read_text("utf-8")


def size_named(text: str, **where: str) -> Size:
    """The problem size TEXT names; anything else is an input error at WHERE."""
    found = next((s for s in SIZES if s == text), None)
    if found is None:
        raise InputError(f"size {text!r} is not one of {', '.join(SIZES)}", **where)
    return found


def _size(doc: dict[str, Any], file: str) -> Size:
    """The problem size: `size:`; `profile:` is its old spelling, which still works."""
    size, old = doc.get("size"), doc.get("profile")
    if old is not None:
        if size is not None and size != old:
            raise InputError(
                f"size is {size!r} but the deprecated profile says {old!r}; keep size only",
                file=file,
                path="$.profile",
            )
        warn(f"{file}::$.profile is deprecated for the problem size: write `size: {old}`")
    return size_named(str(size or old or "smoke"), file=file, path="$.size")


def inside_repository(ref: str, file: str, path: str) -> None:
    """A matrix file names workload files inside the repository the suite runs in (the current
    directory, a checkout): a reference that leads out of it (`../../x/evil.py:W`, an absolute
    path elsewhere, a link that points out) is an input error at FILE and PATH, before anything
    is imported. A reference typed on the command line (--workload) is the user's own."""
    named = file_part(ref)
    if named is None:
        return
    root = Path.cwd().resolve()
    if not (root / named).resolve().is_relative_to(root):
        raise InputError(
            f"workload file {named!r} is outside the repository the suite runs in ({root}): "
            "a matrix names workload files inside it",
            file=file,
            path=path,
        )


def _from_doc(doc: Any, file: str, sha256: str) -> Matrix:
    validate(doc, "torch-matrix/matrix", file=file)
    for i, w in enumerate(doc["workloads"]):
        inside_repository(str(w["workload"]), file, f"$.workloads[{i}].workload")
    entries = [
        Entry(
            ref=w["workload"],
            lane=w.get("lane", "production"),
            grid={k: list(v) for k, v in w.get("grid", {}).items()},
            backends=tuple(w["backends"]) if "backends" in w else None,
            timeout_s=float(w["timeout"]) if "timeout" in w else None,
            index=i,
            world=_worlds(w.get("world")),
        )
        for i, w in enumerate(doc["workloads"])
    ]
    return Matrix(
        name=doc.get("name", Path(file).stem if file != DEFAULT_MATRIX_NAME else "default"),
        file=file,
        sha256=sha256,
        profile=_size(doc, file),
        backends=tuple(doc.get("backends", backend_names())),
        timeout_s=float(doc.get("timeout", DEFAULT_TIMEOUT_S)),
        entries=entries,
        runners={k: list(v) for k, v in doc.get("runners", {}).items()},
        pin_sources={str(k): str(v) for k, v in doc.get("pin-source", {}).items()},
        requirements=tuple(str(r) for r in doc.get("requirements", ())),
        launcher=dict(doc["launcher"]) if "launcher" in doc else None,
        launcher_where={"file": file, "path": "$.launcher"},
    )


def _worlds(world: dict[str, list[int]] | None) -> tuple[tuple[int, int], ...]:
    """The (nodes, ranks per node) pairs a `world:` sweeps; an axis it leaves out is filled in
    by expand() from the workload's default (ranks) or one node."""
    if not world:
        return ()
    nodes = world.get("nodes") or [0]
    ranks = world.get("ranks_per_node") or [0]
    return tuple(itertools.product(nodes, ranks))


def load_matrix(path: Path | None) -> Matrix:
    if path is None:
        text = default_matrix_text()
        return _from_doc(
            load_yaml(text), DEFAULT_MATRIX_NAME, hashlib.sha256(text.encode()).hexdigest()
        )
    doc, digest = load_spec_document(path)
    return _from_doc(doc, str(path), digest)


def select(
    matrix: Matrix, workloads: Sequence[str], backends: Sequence[str], profile: str | None
) -> Matrix:
    """Apply --workload, --backend and --profile from the command line."""
    entries = matrix.entries
    if workloads:
        wanted = set(workloads)
        entries = [e for e in entries if e.ref in wanted]
        present = {e.ref for e in entries}
        entries += [
            Entry(w, "production", {}, None, None, None) for w in workloads if w not in present
        ]
    for b in backends:
        if b not in backend_names():
            raise InputError(
                f"unknown backend {b!r}; expected one of {', '.join(backend_names())}",
                option="--backend",
            )
    return Matrix(
        name=matrix.name,
        file=matrix.file,
        sha256=matrix.sha256,
        profile=size_named(profile, option="--size") if profile else matrix.profile,
        backends=tuple(backends) if backends else matrix.backends,
        timeout_s=matrix.timeout_s,
        entries=entries,
        runners=matrix.runners,
        pin_sources=matrix.pin_sources,
        requirements=matrix.requirements,
        launcher=matrix.launcher,
        launcher_where=matrix.launcher_where,
    )


def _entry_path(matrix: Matrix, entry: Entry, *rest: str) -> str:
    if entry.index is None:
        return "--workload"
    return f"$.workloads[{entry.index}]" + "".join(f".{r}" for r in rest)


def _grid(matrix: Matrix, entry: Entry, resolved: Resolved) -> list[dict[str, ParamValue]]:
    declared = {p.name: p for p in resolved.workload.params}
    for name, values in entry.grid.items():
        if name not in declared:
            raise InputError(
                f"workload {resolved.workload.name!r} has no parameter {name!r} "
                f"(it has: {', '.join(declared) or 'none'})",
                file=matrix.file,
                path=_entry_path(matrix, entry, "grid", name),
            )
        allowed = declared[name].values
        for i, value in enumerate(values):
            if allowed and value not in allowed:
                raise InputError(
                    f"{value!r} is not a value of {name!r}; "
                    f"allowed: {', '.join(map(str, allowed))}",
                    file=matrix.file,
                    path=_entry_path(matrix, entry, "grid", name) + f"[{i}]",
                )
    axes = [entry.grid.get(p.name, list(p.default)) for p in resolved.workload.params]
    names = [p.name for p in resolved.workload.params]
    return [dict(zip(names, combo, strict=False)) for combo in itertools.product(*axes)]


def expand(matrix: Matrix) -> tuple[list[CellSpec], dict[str, Resolved]]:
    """Every cell of the matrix, in file order, without duplicates."""
    cells: list[CellSpec] = []
    seen: set[str] = set()
    resolved_by_ref: dict[str, Resolved] = {}
    for entry in matrix.entries:
        try:
            resolved = resolved_by_ref.get(entry.ref) or resolve(entry.ref)
        except WorkloadError as exc:
            raise InputError(
                exc.detail, file=matrix.file, path=_entry_path(matrix, entry, "workload")
            ) from None
        resolved_by_ref[entry.ref] = resolved
        workload = resolved.workload
        backends = entry.backends or matrix.backends
        if matrix.backends and entry.backends:
            backends = tuple(b for b in entry.backends if b in matrix.backends)
        if entry.world and not workload.distributed:
            raise InputError(
                f"workload {workload.name!r} runs in one process; only a distributed workload "
                "(fsdp2, checkpoint, collectives, or a plugin that sets distributed = True) "
                "takes a world",
                file=matrix.file,
                path=_entry_path(matrix, entry, "world"),
            )
        for params in _grid(matrix, entry, resolved):
            if workload.skip_reason(params) is not None:
                continue
            default = workload.ranks(params, matrix.profile)
            worlds = [(n or 1, r or default) for n, r in entry.world] or [(1, default)]
            for (nodes, ranks), backend in itertools.product(worlds, backends):
                cell = CellSpec(
                    workload=workload.name,
                    ref=entry.ref,
                    params=tuple(params.items()),
                    backend=backend,
                    profile=matrix.profile,
                    lane="prototype" if workload.prototype else entry.lane,
                    size_tag=workload.size_tag(params, matrix.profile),
                    timeout_s=entry.timeout_s or matrix.timeout_s,
                    ranks=ranks,
                    nodes=nodes,
                    distributed=workload.distributed,
                    restarts=workload.restarts(params, matrix.profile),
                )
                if cell.cell_id not in seen:
                    seen.add(cell.cell_id)
                    cells.append(cell)
    return cells, resolved_by_ref


def select_cells(
    matrix_file: Path | None,
    workloads: Sequence[str],
    backends: Sequence[str],
    cell_ids: Sequence[str],
    size: str | None,
) -> tuple[Matrix, list[CellSpec], dict[str, Resolved]]:
    """The matrix file (or the built-in one) narrowed by --workload, --backend, --cell and
    --size: what every command that runs or plans cells starts from."""
    matrix = select(load_matrix(matrix_file), workloads, backends, size)
    cells, resolved = expand(matrix)
    if cell_ids:
        cells = _named(matrix, cells, resolved, cell_ids)
    if not cells:
        raise InputError(
            "the matrix selects no cells (check --workload and --backend)", file=matrix.file
        )
    return matrix, cells, resolved


def _named(
    matrix: Matrix, cells: list[CellSpec], resolved: dict[str, Resolved], cell_ids: Sequence[str]
) -> list[CellSpec]:
    """The cells --cell names: from the matrix's sweep, or, for a value outside it (a dtype the
    matrix does not sweep), from every value its workloads declare, on the same backends."""
    known = {c.cell_id: c for c in cells}
    if any(c not in known for c in cell_ids):
        wide = replace(
            matrix,
            entries=[
                replace(e, grid={p.name: list(p.values) for p in resolved[e.ref].workload.params})
                for e in matrix.entries
            ],
        )
        known = {c.cell_id: c for c in expand(wide)[0]} | known
    missing = [c for c in cell_ids if c not in known]
    if missing:
        raise InputError(
            f"no cell {missing[0]!r} in this matrix, nor among the other values its workloads "
            "declare (a cell id is the workload, its parameter values in order and its size, "
            "then @backend: sdpa.causal.bf16.fwd.s256@cpu)",
            file=matrix.file,
            option="--cell",
        )
    return [known[c] for c in dict.fromkeys(cell_ids)]
