"""What a pull request changed that did not run for its verdict.

In a run that judges a pull request only the torch pin moves: the suite, the matrix, the policy
and the workload code all come from the base commit (the reusable workflow materializes the base
tree outside the checkout and runs from there). The decision names what the pull request
changed besides its pins, so that a reader sees which of its changes were not judged, and that a
workload changed beside the pin is the base branch's version in every number.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from suite.core.errors import InputError
from suite.flows.plan import matrix_change_note
from suite.untrusted.git import changed_files
from suite.untrusted.shown import shown
from suite.workloads import BUILTINS, file_part
from suite.workloads.matrix import Matrix, expand, load_matrix, select

SHOWN = 5


def read_changed(path: Path | None) -> list[str] | None:
    """The changed files, one path per line (git diff --name-only); None without a file."""
    if path is None:
        return None
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read the changed files: {exc}", file=str(path)) from None
    return [line for line in text.splitlines() if line.strip()]


def changed_paths(repo: Path, base: str, head: str) -> list[str]:
    """The files the change between two commits touches, as git stores their names (read
    through suite/untrusted/git.py: NUL-separated, never quoted, nothing of the head's steering
    git)."""
    return [f.path for f in changed_files(repo, base, head)]


def _word(path: str) -> str:
    """A name as pins' files output writes it: escaped, a space as \\x20."""
    return shown(path).replace(" ", "\\x20")


def plugin_files(refs: Sequence[str]) -> list[str]:
    """The files a matrix's workload references name (path/to/file.py:Object)."""
    found = (file_part(ref) for ref in refs)
    return sorted({str(Path(f)) for f in found if f})


def _named(paths: Sequence[str]) -> str:
    """The first few names, each escaped to one printable line (they are the head's)."""
    named = ", ".join(shown(p) for p in paths[:SHOWN])
    return named + (f" (+{len(paths) - SHOWN} more)" if len(paths) > SHOWN else "")


def change_notes(
    changed: Sequence[str],
    *,
    plugins: Sequence[str],
    pin_files: Sequence[str],
    matrix_file: str | None,
    policy_file: str | None,
    matrix_from_head: bool = False,
) -> list[str]:
    """One line per kind of change: the matrix's workload files, the policy, everything else
    besides the pin files (and the matrix, which plan's matrix_note covers)."""
    notes: list[str] = []
    workload = [p for p in changed if p in plugins]
    if matrix_from_head:
        notes.append(
            f"the matrix {matrix_file} is new in this pull request: its workloads are the "
            "head's, run only inside the sides' containers"
        )
    elif workload:
        notes.append(
            f"this pull request changes {_named(workload)}, workload code of the matrix: the "
            "base branch's version ran"
        )
    if policy_file and policy_file in changed:
        notes.append(
            f"this pull request changes {policy_file}; the base branch's policy was applied"
        )
    skip = {*workload, matrix_file, policy_file}
    pins = set(pin_files)
    other = [p for p in changed if p not in skip and p not in pins and _word(p) not in pins]
    if other:
        count = f"{len(other)} other file{'' if len(other) == 1 else 's'}"
        came = "suite and policy" if matrix_from_head else "suite, matrix, policy and workloads"
        notes.append(
            f"this pull request changes {count}, none of which ran for this verdict (the {came} "
            f"came from the base commit): {_named(other)}"
        )
    return notes


def source_notes(
    changed: Sequence[str] | None,
    pin_files: Sequence[str],
    matrix: Matrix,
    matrix_file: Path | None,
    policy_file: Path | None,
    matrix_from_head: bool,
) -> list[str]:
    """plan's source_notes: what the pull request changed that did not run for its verdict
    (nothing without a list of changed files)."""
    if changed is None:
        return []
    return change_notes(
        changed,
        plugins=plugin_files([e.ref for e in matrix.entries]),
        pin_files=pin_files,
        matrix_file=str(matrix_file) if matrix_file else None,
        policy_file=str(policy_file) if policy_file else None,
        matrix_from_head=matrix_from_head,
    )


def matrix_changes(
    cells: Sequence[Any],
    matrix_file: Path | None,
    head_matrix: Path | None,
    workloads: Sequence[str],
    backends: Sequence[str],
    size: str | None,
) -> str:
    """plan's matrix_note: the cells the pull request's own matrix adds and removes. The head's
    matrix is read as YAML only: its cells are expanded with the base branch's code for the
    workloads the base's matrix or the built-ins name, and a workload only the head names (its
    code is the pull request's, at any path it chose) is never imported: it is named as new in
    the pull request, not run."""
    if head_matrix is None:
        return ""
    where = shown(str(matrix_file or "the built-in matrix"))
    try:
        head = load_matrix(head_matrix)
        known = {e.ref for e in load_matrix(matrix_file).entries} | set(BUILTINS)
        new = sorted({e.ref for e in head.entries if e.ref not in known})
        ours = replace(head, entries=[e for e in head.entries if e.ref in known])
        head_cells = expand(select(ours, workloads, backends, size))[0] if ours.entries else []
    except InputError as exc:
        return (
            f"this pull request changes {where}, which does not load there ({shown(str(exc))}); "
            "the base branch's matrix ran"
        )
    base_ids = [c.cell_id for c in cells]
    head_ids = [c.cell_id for c in head_cells if c.backend in backends]
    note = matrix_change_note(base_ids, head_ids, where)
    if new:
        named = ", ".join(shown(ref) for ref in new[:5]) + (" …" if len(new) > 5 else "")
        said = (
            f"this pull request's matrix names {len(new)} workload(s) new in it, not imported "
            f"and not run: {named}"
        )
        note = f"{note}. {said}" if note else said
    return note
