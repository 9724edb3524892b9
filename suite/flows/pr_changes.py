"""What a pull request changed that did not run for its verdict.

In a run that judges a pull request only the torch pin moves: the suite, the matrix, the policy
and the workload code all come from the base commit (the reusable workflow materializes the base
tree outside the checkout and runs from there). The decision names what the pull request
changed besides its pins, so that a reader sees which of its changes were not judged, and that a
workload changed beside the pin is the base branch's version in every number.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from suite.core.errors import InputError
from suite.workloads import file_part
from suite.workloads.matrix import Matrix

SHOWN = 5


def read_changed(path: Path) -> list[str]:
    """The changed files, one path per line (git diff --name-only)."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read the changed files: {exc}", file=str(path)) from None
    return [line for line in text.splitlines() if line.strip()]


def plugin_files(refs: Sequence[str]) -> list[str]:
    """The files a matrix's workload references name (path/to/file.py:Object)."""
    found = (file_part(ref) for ref in refs)
    return sorted({str(Path(f)) for f in found if f})


def _named(paths: Sequence[str]) -> str:
    shown = ", ".join(paths[:SHOWN])
    return shown + (f" (+{len(paths) - SHOWN} more)" if len(paths) > SHOWN else "")


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
    skip = {*workload, *pin_files, matrix_file, policy_file}
    other = [p for p in changed if p not in skip]
    if other:
        count = f"{len(other)} other file{'' if len(other) == 1 else 's'}"
        came = "suite and policy" if matrix_from_head else "suite, matrix, policy and workloads"
        notes.append(
            f"this pull request changes {count}, none of which ran for this verdict (the {came} "
            f"came from the base commit): {_named(other)}"
        )
    return notes


def source_notes(
    changed_files: Path | None,
    pin_files: Sequence[str],
    matrix: Matrix,
    matrix_file: Path | None,
    policy_file: Path | None,
    matrix_from_head: bool,
) -> list[str]:
    """plan's source_notes: what the pull request changed that did not run for its verdict
    (nothing without a list of changed files)."""
    if changed_files is None:
        return []
    return change_notes(
        read_changed(changed_files),
        plugins=plugin_files([e.ref for e in matrix.entries]),
        pin_files=pin_files,
        matrix_file=str(matrix_file) if matrix_file else None,
        policy_file=str(policy_file) if policy_file else None,
        matrix_from_head=matrix_from_head,
    )
