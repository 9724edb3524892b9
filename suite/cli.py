"""Command line: parse, build, execute. The only place that turns errors into exit codes."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import click

from suite import __version__
from suite.errors import SuiteError

F = TypeVar("F", bound=Callable[..., Any])

EXIT_CODES = """\b
Exit codes:
  0  every cell ran (ok, unsupported or skipped)
  1  the run finished, but some cells failed, crashed, timed out or ran out of memory
  2  invalid input: a matrix, result or argument is wrong (the message names file and field)
  3  environment problem: no torch in the interpreter, output not writable, ...
  130  interrupted"""


def _fail(exc: SuiteError) -> None:
    click.echo(f"torch-matrix: error: {exc}", err=True)
    sys.exit(exc.exit_code)


def handles_errors(fn: F) -> F:
    import functools

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except SuiteError as exc:
            _fail(exc)
        except KeyboardInterrupt:
            click.echo("torch-matrix: interrupted", err=True)
            sys.exit(130)

    return wrapper  # type: ignore[return-value]


@click.group(
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
    epilog=EXIT_CODES,
)
@click.version_option(__version__, prog_name="torch-matrix")
def main() -> None:
    """Run the same PyTorch workloads on a baseline and a candidate torch pin, across backends,
    and decide whether to adopt the upgrade."""


def matrix_options(fn: F) -> F:
    """The options that choose cells, shared by run and ab."""
    decorators = [
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
            type=click.Choice(["cpu", "cuda", "rocm", "mps"]),
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
            type=click.Choice(["smoke", "full"]),
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
    ]
    for decorator in reversed(decorators):
        fn = decorator(fn)
    return fn


def plan(
    matrix_file: Path | None,
    workloads: Sequence[str],
    backends: Sequence[str],
    cell_ids: Sequence[str],
    size: str | None,
) -> tuple[Any, list[Any], dict[str, Any]]:
    from suite.errors import InputError
    from suite.matrix import expand, load_matrix, select

    matrix = select(load_matrix(matrix_file), workloads, backends, size)
    cells, resolved = expand(matrix)
    if cell_ids:
        known = {c.cell_id for c in cells}
        missing = [c for c in cell_ids if c not in known]
        if missing:
            raise InputError(
                f"no cell {missing[0]!r} in this matrix", file=matrix.file, path="--cell"
            )
        cells = [c for c in cells if c.cell_id in set(cell_ids)]
    if not cells:
        raise InputError(
            "the matrix selects no cells (check --workload and --backend)", file=matrix.file
        )
    return matrix, cells, resolved


def memory_limit_bytes(memory_limit: float | None) -> int | None:
    from suite.runner import default_memory_limit

    return int(memory_limit * 2**30) if memory_limit else default_memory_limit()


@main.command(epilog=EXIT_CODES)
@matrix_options
@click.option(
    "--profile",
    "size_alias",
    type=click.Choice(["smoke", "full"]),
    help="Same as --size (in ab and compare, --profile names the policy profile).",
)
@click.option(
    "--out",
    type=click.Path(path_type=Path),
    help="Run directory (default: torch-matrix-runs/RUN_ID).",
)
@click.option(
    "--resume",
    is_flag=True,
    help="Finish the run in --out: keep valid cell records, rerun the rest.",
)
@click.option(
    "--python",
    "interpreter",
    default=sys.executable,
    show_default="this interpreter",
    help="Interpreter whose torch runs the cells.",
)
@handles_errors
def run(
    matrix_file: Path | None,
    workloads: Sequence[str],
    backends: Sequence[str],
    cell_ids: Sequence[str],
    size: str | None,
    timeout: float | None,
    memory_limit: float | None,
    size_alias: str | None,
    out: Path | None,
    resume: bool,
    interpreter: str,
) -> None:
    """Run a matrix of workloads, each cell in a fresh worker process, and write evidence."""
    from suite.errors import InputError
    from suite.progress import Progress
    from suite.results import new_run_id
    from suite.runner import RunOptions, run_matrix

    matrix, cells, resolved = plan(matrix_file, workloads, backends, cell_ids, size or size_alias)
    run_id = new_run_id()
    if out is None:
        if resume:
            raise InputError("--resume needs --out: the run directory to finish")
        out = Path("torch-matrix-runs") / run_id
    options = RunOptions(
        out=out,
        interpreter=interpreter,
        resume=resume,
        timeout_s=timeout,
        memory_limit_bytes=memory_limit_bytes(memory_limit),
        command=["torch-matrix", *sys.argv[1:]],
        progress=Progress(len(cells), stream=sys.stderr),
        run_id=run_id,
    )
    click.echo(
        f"torch-matrix {__version__}: {len(cells)} cells, profile {matrix.profile}, out {out}",
        err=True,
    )
    summary = run_matrix(matrix, options, cells=cells, resolved=resolved)
    counts: dict[str, int] = {}
    for status in summary.statuses.values():
        counts[status] = counts.get(status, 0) + 1
    click.echo(f"run {summary.run_id}: " + ", ".join(f"{n} {s}" for s, n in sorted(counts.items())))
    click.echo(f"results: {summary.run_dir}")
    sys.exit(1 if summary.failed else 0)


@main.command(epilog=EXIT_CODES)
@click.argument("files", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option(
    "--kind",
    type=click.Choice(["matrix", "result", "run", "environment", "policy", "decision"]),
    help="Check as this kind instead of detecting it from the file.",
)
@handles_errors
def validate(files: Sequence[Path], kind: str | None) -> None:
    """Schema-check files the suite writes or reads. A run directory checks every file in it."""
    from suite.errors import InputError
    from suite.validation import validate_file

    targets: list[Path] = []
    for f in files:
        if f.is_dir():
            found = sorted(p for p in f.rglob("*.json") if not p.name.startswith("."))
            if not found:
                raise InputError("directory holds no .json files", file=str(f))
            targets.extend(found)
        else:
            targets.append(f)
    bad = 0
    for target in targets:
        try:
            found_kind = validate_file(target, f"torch-matrix/{kind}" if kind else None)
            click.echo(f"ok  {target} ({found_kind})")
        except InputError as exc:
            bad += 1
            click.echo(f"torch-matrix: error: {exc}", err=True)
    if bad:
        sys.exit(2)


@main.command(epilog=EXIT_CODES)
@click.option("--json", "as_json", is_flag=True, help="Print the full JSON record.")
@handles_errors
def env(as_json: bool) -> None:
    """Print the environment record of this interpreter."""
    from suite.envinfo import environment
    from suite.validation import validate as check

    record = environment()
    check(record, "torch-matrix/environment", file="<environment>")
    if as_json:
        click.echo(json.dumps(record, indent=2))
        return
    t = record["torch"]
    click.echo(f"torch       {t['version']} ({t['git_version']})")
    click.echo(f"cuda/hip    {t['cuda']} / {t['hip']}   cudnn {t['cudnn']}   nccl {t['nccl']}")
    click.echo(f"python      {record['python']} ({record['interpreter']})")
    click.echo(f"os          {record['os']['platform']}")
    click.echo(
        f"cpu         {record['cpu']['model']} ({record['cpu']['logical_cores']} logical cores)"
    )
    for name, b in record["backends"].items():
        state = (
            "available " + ", ".join(b["devices"]) if b["available"] else f"absent: {b['reason']}"
        )
        click.echo(f"{name:<11} {state}")
    for k, v in record["env_vars"].items():
        click.echo(f"env         {k}={v}")
