"""The commands of one run: run a matrix, check the files the suite reads and writes, and print
this interpreter's environment."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path

import click

from suite import __version__
from suite.cli.edge import handles_errors
from suite.cli.options import (
    EXIT_CODES,
    SIZE_CHOICE,
    CellChoice,
    fresh_out,
    matrix_options,
)
from suite.core.errors import InputError, warn


@click.command(epilog=EXIT_CODES)
@matrix_options
@click.option(
    "--profile",
    "size_alias",
    type=SIZE_CHOICE,
    help="Deprecated: use --size (--profile names the policy profile in ab and compare).",
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
    chosen: CellChoice,
    size_alias: str | None,
    out: Path | None,
    resume: bool,
    interpreter: str,
) -> None:
    """Run a matrix of workloads, each cell in a fresh worker process, and write evidence."""
    from suite.core.results import new_run_id
    from suite.execute.environment import RunOptions
    from suite.execute.progress import Progress
    from suite.execute.runner import run_matrix

    if size_alias is not None:
        warn(
            f"run --profile {size_alias} is deprecated for the problem size: "
            f"use --size {size_alias}"
        )
    matrix, cells, resolved = chosen.select(size_alias)
    run_id = new_run_id()
    if out is None:
        if resume:
            raise InputError("--resume needs --out: the run directory to finish")
        out = Path("torch-matrix-runs") / run_id
    fresh_out(out, resume=resume)
    options = RunOptions(
        out=out,
        interpreter=interpreter,
        resume=resume,
        timeout_s=chosen.timeout,
        memory_limit_bytes=chosen.memory_limit_bytes,
        command=["torch-matrix", *sys.argv[1:]],
        progress=Progress(len(cells), stream=sys.stderr),
        run_id=run_id,
    )
    click.echo(
        f"torch-matrix {__version__}: {len(cells)} cells, size {matrix.profile}, out {out}",
        err=True,
    )
    summary = run_matrix(matrix, options, cells=cells, resolved=resolved)
    counts: dict[str, int] = {}
    for status in summary.statuses.values():
        counts[status] = counts.get(status, 0) + 1
    click.echo(f"run {summary.run_id}: " + ", ".join(f"{n} {s}" for s, n in sorted(counts.items())))
    click.echo(f"results: {summary.run_dir}")
    sys.exit(1 if summary.failed else 0)


@click.command(epilog=EXIT_CODES)
@click.argument("files", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option(
    "--kind",
    type=click.Choice(
        ["matrix", "result", "run", "environment", "policy", "decision", "calibration"]
    ),
    help="Check as this kind instead of detecting it from the file.",
)
@handles_errors
def validate(files: Sequence[Path], kind: str | None) -> None:
    """Schema-check files the suite writes or reads. A run directory checks every file in it."""
    from suite.core.validation import validate_file

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
            for line in str(exc).splitlines():  # every schema problem, one line each
                click.echo(f"torch-matrix: error: {line}", err=True)
    if bad:
        sys.exit(2)


@click.command(epilog=EXIT_CODES)
@click.option("--json", "as_json", is_flag=True, help="Print the full JSON record.")
@handles_errors
def env(as_json: bool) -> None:
    """Print the environment record of this interpreter."""
    from suite.core.validation import validate as check
    from suite.worker.envinfo import environment

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
