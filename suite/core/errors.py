"""Typed errors. Core code raises these; only cli.py turns them into exit codes."""

from __future__ import annotations

import errno


class SuiteError(Exception):
    """Base class. The message says what went wrong and what to do about it."""

    exit_code = 3


class InputError(SuiteError):
    """A file or argument the user gave is invalid (exit code 2)."""

    exit_code = 2

    def __init__(
        self,
        message: str,
        *,
        file: str | None = None,
        path: str | None = None,
        option: str | None = None,
    ) -> None:
        """file: the file at fault; path: the JSON path inside it; option: the command-line
        option (or argument) that was given wrongly, never put in the path slot."""
        self.file = file
        self.path = path
        self.option = option
        self.detail = message
        where = ""
        if file is not None:
            where = f"{file}::{path}: " if path else f"{file}: "
        if option is not None:
            where = f"{option} {where}" if where else f"{option}: "
        super().__init__(f"{where}{message}")


class SchemaErrors(InputError):
    """Every schema problem of one document; the first is the most relevant (path and detail
    are its), and the message lists all, one `file::$.path: message` per line."""

    def __init__(self, problems: list[tuple[str, str]], *, file: str) -> None:
        path, message = problems[0]
        super().__init__(message, file=file, path=path)
        self.problems = problems

    def __str__(self) -> str:
        return "\n".join(f"{self.file}::{path}: {message}" for path, message in self.problems)


class SchemaVersionError(InputError):
    """A file carries a schema version this suite does not read."""


class WorkloadError(InputError):
    """A workload reference cannot be resolved or its parameters are invalid."""


class EnvironmentProblem(SuiteError):
    """The machine cannot do what was asked (no interpreter, no docker, unwritable dir)."""

    exit_code = 3


# A disk that cannot take a file: one clear error (exit 3), not a traceback per open file.
_NO_ROOM = {
    errno.ENOSPC: "the disk is full",
    errno.EDQUOT: "the disk quota is used up",
    errno.EROFS: "the file system is read-only",
}


def no_room(exc: OSError, what: str) -> EnvironmentProblem | None:
    """The EnvironmentProblem for a write that failed for want of room (full disk, quota,
    read-only file system), naming what was being written; None for any other OSError."""
    if exc.errno not in _NO_ROOM:
        return None
    return EnvironmentProblem(
        f"cannot write {what}: {_NO_ROOM[exc.errno]} ({exc.strerror}); free room (or make it "
        "writable) and run again"
    )


def warn(message: str) -> None:
    """A warning for the user on stderr (a deprecated spelling, a doubtful input); never an
    error, so it changes no exit code."""
    import sys

    sys.stderr.write(f"torch-matrix: warning: {message}\n")
