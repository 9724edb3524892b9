"""The decision artifact the comment job reads. It comes from a run the pull request triggered,
whose caller workflow a same-repository pull request can edit, so it is data like any head
bytes: one plain file (no link, nothing else), read once under the cap of a document, parsed
with repeated keys refused, and valid against the decision schema, or an input error naming the
file. Whether it is the head's decision (its commit, full SHAs only) is the comment's check."""

from __future__ import annotations

import stat
from pathlib import Path

from suite.core.decision_records import DecisionRecord
from suite.core.errors import InputError
from suite.core.validation import parse_document, read_capped, validate


def read_decision(path: Path) -> DecisionRecord:
    """The decision record at PATH, read as above."""
    try:
        mode = path.lstat().st_mode
    except FileNotFoundError:
        raise InputError("file not found", file=str(path)) from None
    except OSError as exc:
        raise InputError(f"cannot read file: {exc}", file=str(path)) from None
    if not stat.S_ISREG(mode):
        raise InputError("not a plain file (a link or another kind): refused", file=str(path))
    doc = parse_document(read_capped(path), path)
    if not isinstance(doc, dict):
        raise InputError("expected an object at the top level", file=str(path), path="$")
    validate(doc, "torch-matrix/decision", file=str(path))
    return doc  # type: ignore[return-value]
