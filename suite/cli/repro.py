"""The `torch-matrix repro` command: print, and with --run execute, the exact command that reruns
one cell of a finished run (registered on the group in suite/cli/main.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from suite.cli.edge import handles_errors

REPRO_EPILOG = """\b
Exit codes:
  0  printed; with --run: the cell ran again (ok, unsupported or skipped)
  1  with --run: the cell failed, crashed, timed out or ran out of memory again
  2  invalid input: no such cell, or DIR is not a run or ab directory
  3  environment problem: no Docker, the image is gone, no record was written"""


@click.command(epilog=REPRO_EPILOG)
@click.argument("cell_id")
@click.option(
    "--results",
    required=True,
    type=click.Path(path_type=Path, file_okay=False),
    metavar="DIR",
    help="A run directory (with run.json) or an ab output directory (candidate/ is searched "
    "first, then baseline/).",
)
@click.option(
    "--run",
    "execute",
    is_flag=True,
    help="Also run it (in the recorded image through Docker, else locally), into a new run "
    "directory DIR/repro/CELL_ID/RUN_ID; the original is never touched.",
)
def repro(cell_id: str, results: Path, execute: bool) -> None:
    """Print the command that reruns CELL_ID exactly as it ran: a `docker run` line when the
    run was inside an image, else a `torch-matrix run` line."""
    handles_errors(_repro)(cell_id, results, execute)


def _repro(cell_id: str, results: Path, execute: bool) -> None:
    from suite.core.records import FAILED_STATUSES
    from suite.flows.repro import locate, make_plan, reproduce

    located = locate(results, cell_id)
    plan = make_plan(located, cell_id)
    where = f"{located.side}/ of {results}" if located.side else str(located.run_dir)
    status = located.record["status"] if located.record else "pending"
    image = plan.image or {}
    in_image = f", image {image.get('digest') or image.get('reference')}" if plan.image else ""
    click.echo(f"{cell_id}: {status} in {where} (run {located.run['run_id']}{in_image})", err=True)
    click.echo(plan.line)
    if not execute:
        return
    click.echo(f"running it into {plan.out} …", err=True)
    path, record = reproduce(plan)
    click.echo(f"new record: {path} (status {record['status']}, was {status})")
    sys.exit(1 if record["status"] in FAILED_STATUSES else 0)
