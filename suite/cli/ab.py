"""The commands that run both sides: ab runs the baseline and the candidate and decides;
calibrate runs one side against itself (an A/A) to measure the runner's noise."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from suite import __version__
from suite.cli.compare import finish_decision
from suite.cli.edge import handles_errors
from suite.cli.options import (
    CALIBRATE_EXIT_CODES,
    DECISION_EXIT_CODES,
    DEFAULT_CALIBRATION,
    CellChoice,
    ExtraRequirements,
    calibration_option,
    format_option,
    fresh_out,
    github_step_option,
    index_options,
    matrix_options,
    policy_options,
    requirement_options,
    warn_below_resolution,
)
from suite.core.errors import InputError, warn
from suite.core.secrets import redact_text
from suite.execute.indexes import Indexes
from suite.github.outputs import step_outputs_on_error
from suite.report import write_reports

if TYPE_CHECKING:
    from suite.core.decision_records import DecisionRecord
    from suite.execute.pinned import BaselinePins
    from suite.execute.prepared import PreparedSide


@click.command(epilog=DECISION_EXIT_CODES)
@click.option(
    "--baseline",
    default="current",
    show_default=True,
    metavar="SIDE",
    help="torch==X.Y.Z (a cached venv is made), a path to a Python with torch, "
    "docker:IMAGE (each worker in a container of a local image), or 'current' (this interpreter).",
)
@click.option(
    "--candidate",
    metavar="SIDE",
    help="Same forms as --baseline; with --resume, the side recorded in --out.",
)
@index_options
@requirement_options
@matrix_options
@policy_options
@click.option(
    "--rounds",
    type=click.IntRange(min=1),
    default=None,
    help="A fixed design: exactly N interleaved rounds and one look at N, whatever the "
    "policy's time budget. Default: the policy's looks (more rounds only for cells whose "
    "timing gates are undecided, within the budget).",
)
@click.option(
    "--out",
    type=click.Path(path_type=Path),
    help="Output directory (default: torch-matrix-runs/ab-RUN_ID).",
)
@click.option(
    "--resume",
    is_flag=True,
    help="Continue the A/B in --out where it stopped: whole rounds are kept, a half-finished "
    "one is redone on both sides; the matrix, policy and --rounds must be the same.",
)
@click.option("--no-traces", is_flag=True, help="Skip the profiler traces of failing cells.")
@click.option(
    "--reruns",
    type=click.IntRange(min=0, max=10),
    default=None,
    envvar="TORCH_MATRIX_RERUNS",
    help="How often a round that another process disturbed runs again on both sides (default "
    "3; env "
    "TORCH_MATRIX_RERUNS); past that, or with 0, the round is kept marked disturbed and the "
    "timing gates leave it out and say so.",
)
@click.option(
    "--count/--no-count",
    default=True,
    envvar="TORCH_MATRIX_COUNT",
    show_default=True,
    help="Count the CPU cells' instructions when the policy names the instructions gate "
    "(env TORCH_MATRIX_COUNT=0 turns it off); not counted, the gate is untested.",
)
@click.option(
    "--keep-counts/--recount",
    default=True,
    envvar="TORCH_MATRIX_KEEP_COUNTS",
    show_default=True,
    help="Reuse a count kept from an earlier run of the same cell on the same build and code, "
    "and keep this run's (--recount counts every cell again and keeps nothing).",
)
@click.option(
    "--job",
    metavar="NAME",
    help="The bench job's name in the plan (cpu-1): recorded in both sides' run.json, so that "
    "aggregate --plan judges these results only as that job's artifact.",
)
@calibration_option
@format_option
@github_step_option
@handles_errors
def ab(
    baseline: str,
    candidate: str | None,
    indexes: dict[str, Indexes],
    extra: ExtraRequirements,
    chosen: CellChoice,
    policy_file: Path | None,
    policy_profile: str | None,
    rounds: int | None,
    out: Path | None,
    resume: bool,
    no_traces: bool,
    reruns: int | None,
    count: bool,
    keep_counts: bool,
    job: str | None,
    calibration_file: Path | None,
    fmt: str,
    github_step: bool,
) -> None:
    """Run the same cells on a baseline and a candidate torch, interleaved, and decide."""
    from suite.core.results import new_run_id
    from suite.execute.progress import Progress
    from suite.execute.side_deps import matrix_requirements
    from suite.flows.ab import AbOptions, design_for, run_ab
    from suite.judge.policy import load_policy

    with step_outputs_on_error(github_step, out):
        policy = load_policy(policy_file, policy_profile)  # fixed before anything runs
        matrix, cells, resolved = chosen.select()
        warn_below_resolution(calibration_file, cells, lambda: policy)
        baseline, candidate = _sides(baseline, candidate, out, resume)
        with_requirements = extra.read()
        needs = matrix_requirements(matrix.requirements, matrix.file)
        if resume and out is not None:
            from suite.flows.ab import recorded_requirements

            with_requirements = recorded_requirements(out, with_requirements, needs)
        out = out or Path("torch-matrix-runs") / f"ab-{new_run_id()}"
        fresh_out(out, resume=resume, holds=("baseline/run.json", "candidate/run.json"))
        base_side, cand_side = _prepare(baseline, candidate, out, indexes, with_requirements, needs)
        design = design_for(policy, rounds)
        looks = ", ".join(str(n) for n in design.looks)
        budget = f", budget {design.budget_s:g}s" if design.budget_s is not None else ""
        click.echo(
            f"torch-matrix {__version__}: {len(cells)} cells x 2 sides, looks at {looks} rounds"
            f"{budget}, policy {policy.profile} ({policy.sha256[:12]}), out {out}",
            err=True,
        )
        options = AbOptions(
            out=out,
            rounds=rounds,
            timeout_s=chosen.timeout,
            memory_limit_bytes=chosen.memory_limit_bytes,
            progress=Progress(len(cells) * design.looks[0] * 2, stream=sys.stderr),
            traces=not no_traces,
            resume=resume,
            count=count,
            keep_counts=keep_counts,
            job=job,
            reruns=reruns,
        )
        decision = run_ab(matrix, cells, resolved, base_side, cand_side, policy, options)
        _echo_phases(decision)
        write_reports(decision, out)
        click.echo(f"decision: {decision['decision']} — reports in {out}", err=True)
        finish_decision(decision, fmt, out=out, github_step=github_step)


def _sides(baseline: str, candidate: str | None, out: Path | None, resume: bool) -> tuple[str, str]:
    """The two sides to run: as given, or as recorded in --out when resuming; both parse."""
    from suite.execute.sides import parse
    from suite.flows.ab import recorded_sides

    if resume:
        if out is None:
            raise InputError("--resume needs the --out of the A/B to continue", option="--out")
        baseline, candidate = recorded_sides(out, baseline, candidate)
    elif candidate is None:
        raise InputError(
            "give the candidate side, e.g. --candidate torch==2.14.1", option="--candidate"
        )
    parse(baseline, "baseline")
    parse(candidate, "candidate")
    return baseline, candidate


def _prepare(
    baseline: str,
    candidate: str,
    out: Path,
    indexes: dict[str, Indexes],
    with_requirements: tuple[str, ...],
    needs: tuple[str, ...] = (),
) -> tuple[PreparedSide, PreparedSide]:
    """Both sides, ready: each with --with's requirements and the matrix's (an image side takes
    the matrix's as built; --with it refuses). The baseline first: a candidate venv is held to the
    versions the baseline holds (suite/execute/pinned.py), so that only the torch pin differs; what
    it cannot hold is named. A resumed A/B reads the same baseline again, so gets the same venv."""
    from suite.execute.sides import admitted, baseline_pins, prepare, takes_extra, takes_pins
    from suite.judge.packages import COMPANIONS

    admitted(baseline, "baseline", with_requirements)  # neither prepared if one cannot take them
    admitted(candidate, "candidate", with_requirements)
    for role, given in indexes.items():  # nor if one's indexes are refused (an unapproved host)
        if given:
            given.expanded(option=f"--{role}-index-url")
    log = out / "prepare.log"

    def ready(spec: str, role: str, pins: BaselinePins | None = None) -> PreparedSide:
        click.echo(f"preparing {role} {redact_text(spec)} …", err=True)
        reqs = with_requirements + tuple(
            r for r in needs if takes_extra(spec, role) and r not in with_requirements
        )
        return prepare(
            spec, role, log=log, indexes=indexes[role], with_requirements=reqs, pins=pins
        )

    base = ready(baseline, "baseline")
    pins = baseline_pins(base, COMPANIONS) if takes_pins(candidate, "candidate") else None
    cand = ready(candidate, "candidate", pins)
    for relaxed in cand.relaxed:
        warn(relaxed.warning())
    return base, cand


def _echo_phases(decision: DecisionRecord) -> None:
    """Where the A/B's time went, phase by phase."""
    beside = decision.get("phases_beside", {})
    split = ", ".join(
        f"{k} {v:.0f} s" + (f" (beside {beside[k]})" if k in beside else "")
        for k, v in decision.get("phases", {}).items()
    )
    click.echo(f"phases: {split}", err=True)


@click.command(epilog=CALIBRATE_EXIT_CODES)
@matrix_options
@policy_options
@click.option(
    "--side",
    default="current",
    show_default=True,
    metavar="SIDE",
    help="The torch to calibrate with, as both sides of an A/A: same forms as ab --baseline.",
)
@requirement_options
@click.option(
    "--rounds",
    type=click.IntRange(min=4),
    default=10,
    show_default=True,
    help="A/A rounds. Even numbers give each order of the sides as many rounds.",
)
@click.option(
    "--out",
    type=click.Path(path_type=Path, dir_okay=False),
    default=DEFAULT_CALIBRATION,
    show_default=True,
    help="Calibration file to write; ab and plan read it from here by default.",
)
@click.option("--force", is_flag=True, help="Overwrite --out if it exists.")
@click.option(
    "--runs",
    type=click.Path(path_type=Path, file_okay=False),
    help="Folder for the A/A's two runs (default: torch-matrix-runs/calibrate-RUN_ID).",
)
@handles_errors
def calibrate(
    chosen: CellChoice,
    policy_file: Path | None,
    policy_profile: str | None,
    side: str,
    extra: ExtraRequirements,
    rounds: int,
    out: Path,
    force: bool,
    runs: Path | None,
) -> None:
    """Measure this runner's round-to-round noise with an A/A of one torch, and the smallest
    change each timing threshold of the policy can detect here within its looks and budget."""
    from suite.core.records import FAILED_STATUSES
    from suite.core.results import new_run_id
    from suite.execute.progress import Progress
    from suite.execute.side_deps import matrix_requirements
    from suite.execute.sides import prepare, takes_extra
    from suite.flows.calibrate import CalibrateOptions, check_out, run_calibration
    from suite.judge.policy import load_policy
    from suite.report.calibration import render_calibration

    policy = load_policy(policy_file, policy_profile)
    matrix, cells, resolved = chosen.select()
    with_requirements = extra.read()
    with_requirements += tuple(
        r
        for r in matrix_requirements(matrix.requirements, matrix.file)
        if takes_extra(side, "side") and r not in with_requirements
    )
    check_out(out, force)
    runs = runs or Path("torch-matrix-runs") / f"calibrate-{new_run_id()}"
    fresh_out(runs)
    click.echo(f"preparing {side} …", err=True)
    prepared = prepare(side, "side", log=runs / "prepare.log", with_requirements=with_requirements)
    click.echo(
        f"torch-matrix {__version__}: A/A of {len(cells)} cells on {side}, {rounds} rounds, "
        f"policy {policy.profile} ({policy.sha256[:12]}), runs in {runs}",
        err=True,
    )
    options = CalibrateOptions(
        out=out,
        runs=runs,
        rounds=rounds,
        timeout_s=chosen.timeout,
        memory_limit_bytes=chosen.memory_limit_bytes,
        progress=Progress(len(cells) * rounds * 2, stream=sys.stderr),
        force=force,
    )
    doc = run_calibration(matrix, cells, resolved, prepared, policy, options)
    click.echo(render_calibration(doc), nl=False)
    click.echo(f"calibration: {out}", err=True)
    sys.exit(1 if any(c["status"] in FAILED_STATUSES for c in doc["cells"]) else 0)
