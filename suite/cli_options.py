"""Options and edge helpers that commands in several modules share.

A module of its own because suite.cli registers the commands of suite.cli_ci at import time:
the option decorators those commands need cannot come from suite.cli without a cycle.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

if TYPE_CHECKING:
    from suite.policy import Policy
    from suite.spec import CellSpec

F = TypeVar("F", bound=Callable[..., Any])

# Where `calibrate` writes by default, and where `ab` and `plan` look when given no file.
DEFAULT_CALIBRATION = "torch-matrix-calibration.json"


def policy_options(fn: F) -> F:
    fn = click.option(
        "--profile",
        "policy_profile",
        metavar="NAME",
        help="Policy profile (default: the policy's default_profile).",
    )(fn)
    fn = click.option(
        "--policy",
        "policy_file",
        type=click.Path(path_type=Path),
        help="Policy file (YAML or JSON). Default: the built-in policy.",
    )(fn)
    return fn


def calibration_option(fn: F) -> F:
    return click.option(
        "--calibration",
        "calibration_file",
        type=click.Path(path_type=Path, dir_okay=False),
        metavar="FILE",
        help="A file from `torch-matrix calibrate`: warn, before anything runs, where a timing "
        "threshold is below the change this runner can resolve (thresholds stay as they are). "
        f"Default: {DEFAULT_CALIBRATION} in the current directory, when there is one.",
    )(fn)


def warn_below_resolution(
    given: Path | None, cells: Sequence[CellSpec], policy: Callable[[], Policy]
) -> None:
    """Echo each threshold warning of the calibration to stderr.

    policy: called only when a calibration is in use, so that a command that needs no policy
    otherwise does not load one.
    """
    from suite.calibrate import read_calibration, this_runner, threshold_warnings

    path = given
    if path is None:
        found = Path(DEFAULT_CALIBRATION)
        if not found.is_file():
            return
        click.echo(f"using the calibration in {found}", err=True)
        path = found
    doc = read_calibration(path)
    for line in threshold_warnings(doc, policy(), cells, this_runner()):
        click.echo(f"warning: {line}", err=True)
