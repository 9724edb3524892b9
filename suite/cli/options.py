"""The option groups and exit-code tables that commands in several modules share, and the
CellChoice the matrix options hand a command. It imports no command."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, cast

import click

from suite.core.backends import backend_names, image_backends
from suite.core.errors import InputError
from suite.core.records import SIZES

if TYPE_CHECKING:
    from suite.core.spec import CellSpec
    from suite.judge.policy import Policy
    from suite.workloads import Resolved
    from suite.workloads.matrix import Matrix

F = TypeVar("F", bound=Callable[..., Any])


class RegistryChoice(click.Choice[str]):
    """A choice among the names a registry holds when the command line is read, so that a
    backend or a report format registered after this module was imported (a plugin) is one."""

    def __init__(self, names: Callable[[], Sequence[str]]) -> None:
        self._names = names
        super().__init__(names())

    @property
    def choices(self) -> tuple[str, ...]:
        return tuple(self._names())

    @choices.setter
    def choices(self, _: Sequence[str]) -> None:
        pass  # always read from the registry


def backend_choice() -> RegistryChoice:
    return RegistryChoice(backend_names)


def image_backend_choice() -> RegistryChoice:
    return RegistryChoice(image_backends)


def format_choice() -> RegistryChoice:
    from suite.report import format_names

    return RegistryChoice(format_names)


SIZE_CHOICE = click.Choice(SIZES)

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
    from suite.flows.calibrate import read_calibration, this_runner, threshold_warnings

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


EXIT_CODES = """\b
Exit codes:
  0  every cell ran (ok, unsupported or skipped)
  1  the run finished, but some cells failed, crashed, timed out or ran out of memory
  2  invalid input: a matrix, result or argument is wrong (the message names file and field)
  3  environment problem: no torch in the interpreter, output not writable, ...
  130  interrupted"""


@dataclass(frozen=True)
class CellChoice:
    """What the matrix options chose: which cells, at which size, under which limits."""

    matrix_file: Path | None
    workloads: tuple[str, ...]
    backends: tuple[str, ...]
    cell_ids: tuple[str, ...]
    size: str | None
    timeout: float | None
    memory_limit: float | None
    launcher: str | None = None

    def select(self, size: str | None = None) -> tuple[Matrix, list[CellSpec], dict[str, Resolved]]:
        """The matrix and its chosen cells; size overrides --size (a deprecated spelling), and
        --launcher the matrix's launcher."""
        from suite.execute.launchers import choose_launcher

        matrix, cells, resolved = checked_select(
            self.matrix_file, self.workloads, self.backends, self.cell_ids, size or self.size
        )
        choose_launcher(matrix, cells, self.launcher)
        return matrix, cells, resolved

    @property
    def memory_limit_bytes(self) -> int | None:
        """--memory-limit in bytes; by default 90% of this machine's memory."""
        from suite.execute.environment import default_memory_limit

        if self.memory_limit:
            return int(self.memory_limit * 2**30)
        return default_memory_limit()


def checked_select(
    matrix_file: Path | None,
    workloads: Sequence[str],
    backends: Sequence[str],
    cell_ids: Sequence[str],
    size: str | None,
) -> tuple[Matrix, list[CellSpec], dict[str, Resolved]]:
    """select_cells, after every user workload the matrix and --workload name was imported in a
    bounded child (suite/execute/plugins.py): a plugin that exits, hangs or floods at import
    ends the command as an error naming it, before this process imports it."""
    from suite.execute.plugins import check_plugins
    from suite.workloads.matrix import load_matrix, select_cells

    refs = [*(e.ref for e in load_matrix(matrix_file).entries), *workloads]
    check_plugins(refs)
    return select_cells(matrix_file, workloads, backends, cell_ids, size)


def _cell_options() -> list[Callable[[Any], Any]]:
    """The click options behind a CellChoice, in --help order."""
    return [
        click.option(
            "--matrix",
            "matrix_file",
            type=click.Path(path_type=Path),
            help="Matrix file (YAML or JSON). Default: the built-in matrix.",
        ),
        click.option(
            "--workload",
            "workloads",
            multiple=True,
            metavar="NAME|module:object",
            help="Run only these workloads; one not in the matrix is added with its default grid.",
        ),
        click.option(
            "--backend",
            "backends",
            multiple=True,
            type=backend_choice(),
            help="Run only these backends (repeatable).",
        ),
        click.option(
            "--cell",
            "cell_ids",
            multiple=True,
            metavar="CELL_ID",
            help="Run only these cells (repeatable), e.g. to reproduce one.",
        ),
        click.option(
            "--size",
            "size",
            type=SIZE_CHOICE,
            help="Problem sizes (default: the matrix's profile).",
        ),
        click.option(
            "--timeout",
            type=click.FloatRange(min=0, min_open=True),
            metavar="SECONDS",
            help="Per-cell timeout, overriding the matrix.",
        ),
        click.option(
            "--memory-limit",
            type=click.FloatRange(min=0, min_open=True),
            metavar="GIB",
            help="Address-space limit for each CPU cell's worker (default: 90% of RAM).",
        ),
        click.option(
            "--launcher",
            metavar="KIND|FILE|JSON",
            envvar="TORCH_MATRIX_LAUNCHER",
            help="Where a distributed cell's nodes run: local, a YAML file holding a "
            "launcher (kind: ssh, hosts: [...]), or that mapping as JSON; overrides the "
            "matrix's launcher: (also $TORCH_MATRIX_LAUNCHER, where the reusable workflow "
            "puts a backend's launcher).",
        ),
    ]


def matrix_options(fn: F) -> F:
    """The options that choose cells, shared by run, ab and calibrate: the command receives
    them as one CellChoice, its `chosen` argument."""

    @functools.wraps(fn)
    def with_choice(
        *args: Any,
        matrix_file: Path | None,
        workloads: Sequence[str],
        backends: Sequence[str],
        cell_ids: Sequence[str],
        size: str | None,
        timeout: float | None,
        memory_limit: float | None,
        launcher: str | None,
        **kwargs: Any,
    ) -> Any:
        chosen = CellChoice(
            matrix_file, tuple(workloads), tuple(backends), tuple(cell_ids), size, timeout,
            memory_limit, launcher,
        )  # fmt: skip
        return fn(*args, chosen=chosen, **kwargs)

    command: Any = with_choice
    for decorator in reversed(_cell_options()):
        command = decorator(command)
    return cast(F, command)


DECISION_EXIT_CODES = """\b
Exit codes:
  0  adopt      no rule blocks a row, and every gate soft or above was decided somewhere
  4  isolate    failures confined to prototype-lane or isolatable rows
  5  defer      evidence missing or inconclusive, a budget exceeded, a performance regression
  6  rollback   a hard gate failed on a backend the fleet depends on
  2  invalid input (the message names file and field)
  3  environment problem (e.g. a side's environment could not be prepared)
  130  interrupted"""


def fresh_out(out: Path, *, resume: bool = False, holds: Sequence[str] = ("run.json",)) -> None:
    """An output folder must be absent or empty, so that nothing of the user's is overwritten;
    with --resume it must hold what a run of this command writes (holds: relative paths)."""
    if resume:
        missing = [name for name in holds if not (out / name).is_file()]
        if missing:
            raise InputError(
                f"holds no run to resume ({', '.join(missing)} missing)",
                file=str(out),
                option="--out",
            )
        return
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise InputError(
            "is not an empty folder: choose a new or empty --out (nothing was written), or pass "
            "--resume to continue the run it holds",
            file=str(out),
            option="--out",
        )


def index_options(fn: F) -> F:
    """--baseline-index-url, --candidate-index-url and their --*-extra-index-url: where a torch
    requirement side installs from, passed to the command as indexes={role: Indexes}."""
    from suite.execute.indexes import Indexes

    @functools.wraps(fn)
    def with_indexes(
        *args: Any,
        baseline_index_url: str | None,
        baseline_extra_index_urls: Sequence[str],
        candidate_index_url: str | None,
        candidate_extra_index_urls: Sequence[str],
        **kwargs: Any,
    ) -> Any:
        indexes = {
            "baseline": Indexes(baseline_index_url or None, tuple(baseline_extra_index_urls)),
            "candidate": Indexes(candidate_index_url or None, tuple(candidate_extra_index_urls)),
        }
        return fn(*args, indexes=indexes, **kwargs)

    for role in ("candidate", "baseline"):
        with_indexes = click.option(
            f"--{role}-extra-index-url",
            f"{role}_extra_index_urls",
            multiple=True,
            metavar="URL",
            help=f"An extra index for the {role}'s torch; repeatable.",
        )(with_indexes)
        with_indexes = click.option(
            f"--{role}-index-url",
            metavar="URL",
            help=f"The index the {role}'s torch requirement installs from (as pip's --index-url;"
            " ${VAR} is expanded from the environment, a credential never written).",
        )(with_indexes)
    return with_indexes  # type: ignore[return-value]


@dataclass(frozen=True)
class ExtraRequirements:
    """What --with and --requirements gave, read (and the file parsed) only when the command
    asks, inside its error handling."""

    given: tuple[str, ...]
    file: Path | None

    def read(self) -> tuple[str, ...]:
        from suite.execute.side_deps import extra_requirements

        return extra_requirements(self.given, self.file)


def requirement_options(fn: F) -> F:
    """--with and --requirements: what a workload needs beside torch, for every side, passed to
    the command as extra=ExtraRequirements."""

    @functools.wraps(fn)
    def with_extra(*args: Any, with_: Sequence[str], requirements: Path | None, **kw: Any) -> Any:
        return fn(*args, extra=ExtraRequirements(tuple(with_), requirements), **kw)

    with_extra = click.option(
        "--requirements",
        type=click.Path(path_type=Path, dir_okay=False),
        metavar="FILE",
        help="A requirements file (one package a line) of what the workload needs beside torch.",
    )(with_extra)
    with_extra = click.option(
        "--with",
        "with_",
        multiple=True,
        metavar="REQ",
        help="A package the workload needs beside torch (transformers==4.57.1), installed into "
        "each torch==X side's venv and checked in an interpreter side; repeatable.",
    )(with_extra)
    return with_extra  # type: ignore[return-value]


def format_option(fn: F) -> F:
    return click.option(
        "--format",
        "fmt",
        type=format_choice(),
        default="table",
        show_default=True,
        help="Report format on stdout.",
    )(fn)


def github_step_option(fn: F) -> F:
    return click.option(
        "--github-step",
        is_flag=True,
        help="Inside a GitHub Actions step: write the outputs decision and results-path to "
        "$GITHUB_OUTPUT, append the report to $GITHUB_STEP_SUMMARY (cut by whole rows under "
        "1 MiB), and exit 0 for every decision (errors keep their codes), so the workflow "
        "sets the check from the decision output.",
    )(fn)


CALIBRATE_EXIT_CODES = """\b
Exit codes:
  0  the calibration is written, and every cell ran (ok, unsupported or skipped)
  1  the calibration is written, but some cells failed, crashed, timed out or ran out of memory
  2  invalid input, or --out exists (the message names file and field)
  3  environment problem: no torch in the interpreter, output not writable, ...
  130  interrupted"""
