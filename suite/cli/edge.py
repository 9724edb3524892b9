"""The one edge between commands and the shell: every typed error becomes its message on stderr
and its exit code, Ctrl-C becomes exit 130, and no command prints a traceback for either. It
imports no command, so every command module can use it."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import click

from suite.core.errors import SuiteError, no_room

F = TypeVar("F", bound=Callable[..., Any])
INTERRUPTED = 130  # 128 + SIGINT, as a shell reports it


def report(exc: SuiteError) -> None:
    """Print the error, each of its lines prefixed, and exit with its code."""
    for line in str(exc).splitlines() or [""]:
        click.echo(f"torch-matrix: error: {line}", err=True)
    sys.exit(exc.exit_code)


def handles_errors(fn: F) -> F:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except SuiteError as exc:
            report(exc)
        except OSError as exc:
            problem = no_room(exc, exc.filename or "a file")
            if problem is None:
                raise
            report(problem)
        except KeyboardInterrupt:
            click.echo("torch-matrix: interrupted", err=True)
            sys.exit(INTERRUPTED)

    return wrapper  # type: ignore[return-value]
