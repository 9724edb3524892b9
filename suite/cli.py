"""Command line: parse, build, execute. The only place that turns errors into exit codes."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import click

from suite import __version__
from suite.cli_edge import handles_errors
from suite.cli_options import (
    DEFAULT_CALIBRATION,
    calibration_option,
    policy_options,
    warn_below_resolution,
)
from suite.errors import InputError, warn
from suite.matrix import select_cells as plan

F = TypeVar("F", bound=Callable[..., Any])

EXIT_CODES = """\b
Exit codes:
  0  every cell ran (ok, unsupported or skipped)
  1  the run finished, but some cells failed, crashed, timed out or ran out of memory
  2  invalid input: a matrix, result or argument is wrong (the message names file and field)
  3  environment problem: no torch in the interpreter, output not writable, ...
  130  interrupted"""


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


def memory_limit_bytes(memory_limit: float | None) -> int | None:
    from suite.runner import default_memory_limit

    return int(memory_limit * 2**30) if memory_limit else default_memory_limit()


@main.command(epilog=EXIT_CODES)
@matrix_options
@click.option(
    "--profile",
    "size_alias",
    type=click.Choice(["smoke", "full"]),
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

    if size_alias is not None:
        warn(
            f"run --profile {size_alias} is deprecated for the problem size: "
            f"use --size {size_alias}"
        )
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


@main.command(epilog=EXIT_CODES)
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
            for line in str(exc).splitlines():  # every schema problem, one line each
                click.echo(f"torch-matrix: error: {line}", err=True)
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


DECISION_EXIT_CODES = """\b
Exit codes:
  0  adopt      the candidate passes every gate
  4  isolate    failures confined to prototype-lane or isolatable rows
  5  defer      evidence missing or inconclusive, a budget exceeded, a performance regression
  6  rollback   a hard gate failed on a backend the fleet depends on
  2  invalid input (the message names file and field)
  3  environment problem (e.g. a side's environment could not be prepared)
  130  interrupted"""


def format_option(fn: F) -> F:
    return click.option(
        "--format",
        "fmt",
        type=click.Choice(["table", "markdown", "json", "junit"]),
        default="table",
        show_default=True,
        help="Report format on stdout.",
    )(fn)


def write_reports(decision: dict[str, Any], out: Path) -> None:
    from suite.report import render, write_chart
    from suite.results import atomic_write_json

    atomic_write_json(out / "decision.json", decision)
    (out / "decision.md").write_text(render(decision, "markdown"), encoding="utf-8")
    (out / "junit.xml").write_text(render(decision, "junit"), encoding="utf-8")
    write_chart(decision, out / "chart.png")


def github_step_option(fn: F) -> F:
    return click.option(
        "--github-step",
        is_flag=True,
        help="Inside a GitHub Actions step: write the outputs decision and results-path to "
        "$GITHUB_OUTPUT, append the report to $GITHUB_STEP_SUMMARY (cut by whole rows under "
        "1 MiB), and exit 0 for every decision (errors keep their codes), so the workflow "
        "sets the check from the decision output.",
    )(fn)


def finish_decision(
    decision: dict[str, Any],
    fmt: str,
    *,
    out: Path | None = None,
    github_step: bool = False,
    full_report_url: str | None = None,
) -> None:
    from suite.decide import exit_code
    from suite.github.outputs import write_github_output
    from suite.report import render

    click.echo(render(decision, fmt))
    if not github_step:
        sys.exit(exit_code(decision["decision"]))
    outputs = {"decision": decision["decision"]}
    if out is not None:
        outputs["results-path"] = str(out)
    write_github_output(outputs)
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary:
        append_summary(decision, Path(summary), full_report_url)
    sys.exit(0)


@main.command(epilog=DECISION_EXIT_CODES)
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
@matrix_options
@policy_options
@click.option(
    "--rounds",
    type=click.IntRange(min=1),
    default=None,
    help="A fixed design: exactly N interleaved rounds and one look at N. Default: the "
    "policy's looks (more rounds only for cells whose timing gates are undecided).",
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
@calibration_option
@format_option
@github_step_option
@handles_errors
def ab(
    baseline: str,
    candidate: str | None,
    matrix_file: Path | None,
    workloads: Sequence[str],
    backends: Sequence[str],
    cell_ids: Sequence[str],
    size: str | None,
    timeout: float | None,
    memory_limit: float | None,
    policy_file: Path | None,
    policy_profile: str | None,
    rounds: int | None,
    out: Path | None,
    resume: bool,
    no_traces: bool,
    calibration_file: Path | None,
    fmt: str,
    github_step: bool,
) -> None:
    """Run the same cells on a baseline and a candidate torch, interleaved, and decide."""
    from suite.ab import AbOptions, design_for, recorded_sides, run_ab
    from suite.errors import InputError
    from suite.policy import load_policy
    from suite.progress import Progress
    from suite.results import new_run_id
    from suite.sides import parse, prepare

    policy = load_policy(policy_file, policy_profile)  # fixed before anything runs
    matrix, cells, resolved = plan(matrix_file, workloads, backends, cell_ids, size)
    warn_below_resolution(calibration_file, cells, lambda: policy)
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
    out = out or Path("torch-matrix-runs") / f"ab-{new_run_id()}"
    for role in ("baseline", "candidate"):
        if (out / role / "run.json").exists() and not resume:
            raise InputError(
                "already holds a run; pass --resume to continue it, or choose another --out",
                file=str(out / role / "run.json"),
            )
    click.echo(f"preparing baseline {baseline} …", err=True)
    base_side = prepare(baseline, "baseline", log=out / "prepare.log")
    click.echo(f"preparing candidate {candidate} …", err=True)
    cand_side = prepare(candidate, "candidate", log=out / "prepare.log")
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
        timeout_s=timeout,
        memory_limit_bytes=memory_limit_bytes(memory_limit),
        progress=Progress(len(cells) * design.looks[0] * 2, stream=sys.stderr),
        traces=not no_traces,
        resume=resume,
    )
    decision = run_ab(matrix, cells, resolved, base_side, cand_side, policy, options)
    write_reports(decision, out)
    click.echo(f"decision: {decision['decision']} — reports in {out}", err=True)
    finish_decision(decision, fmt, out=out, github_step=github_step)


CALIBRATE_EXIT_CODES = """\b
Exit codes:
  0  the calibration is written, and every cell ran (ok, unsupported or skipped)
  1  the calibration is written, but some cells failed, crashed, timed out or ran out of memory
  2  invalid input, or --out exists (the message names file and field)
  3  environment problem: no torch in the interpreter, output not writable, ...
  130  interrupted"""


@main.command(epilog=CALIBRATE_EXIT_CODES)
@matrix_options
@policy_options
@click.option(
    "--side",
    default="current",
    show_default=True,
    metavar="SIDE",
    help="The torch to calibrate with, as both sides of an A/A: same forms as ab --baseline.",
)
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
    matrix_file: Path | None,
    workloads: Sequence[str],
    backends: Sequence[str],
    cell_ids: Sequence[str],
    size: str | None,
    timeout: float | None,
    memory_limit: float | None,
    policy_file: Path | None,
    policy_profile: str | None,
    side: str,
    rounds: int,
    out: Path,
    force: bool,
    runs: Path | None,
) -> None:
    """Measure this runner's round-to-round noise with an A/A of one torch, and the smallest
    change each timing threshold of the policy can detect here within its looks and budget."""
    from suite.calibrate import CalibrateOptions, check_out, run_calibration
    from suite.policy import load_policy
    from suite.progress import Progress
    from suite.report.calibration import render_calibration
    from suite.results import new_run_id
    from suite.runner import FAILED_STATUSES
    from suite.sides import prepare

    policy = load_policy(policy_file, policy_profile)
    matrix, cells, resolved = plan(matrix_file, workloads, backends, cell_ids, size)
    check_out(out, force)
    runs = runs or Path("torch-matrix-runs") / f"calibrate-{new_run_id()}"
    click.echo(f"preparing {side} …", err=True)
    prepared = prepare(side, "side", log=runs / "prepare.log")
    click.echo(
        f"torch-matrix {__version__}: A/A of {len(cells)} cells on {side}, {rounds} rounds, "
        f"policy {policy.profile} ({policy.sha256[:12]}), runs in {runs}",
        err=True,
    )
    options = CalibrateOptions(
        out=out,
        runs=runs,
        rounds=rounds,
        timeout_s=timeout,
        memory_limit_bytes=memory_limit_bytes(memory_limit),
        progress=Progress(len(cells) * rounds * 2, stream=sys.stderr),
        force=force,
    )
    doc = run_calibration(matrix, cells, resolved, prepared, policy, options)
    click.echo(render_calibration(doc), nl=False)
    click.echo(f"calibration: {out}", err=True)
    sys.exit(1 if any(c["status"] in FAILED_STATUSES for c in doc["cells"]) else 0)


@main.command(epilog=DECISION_EXIT_CODES)
@click.argument("baseline_dir", type=click.Path(path_type=Path))
@click.argument("candidate_dir", type=click.Path(path_type=Path))
@policy_options
@format_option
@click.option(
    "--out",
    "out_file",
    type=click.Path(path_type=Path),
    help="Also write the report (in --format) to this file.",
)
@handles_errors
def compare(
    baseline_dir: Path,
    candidate_dir: Path,
    policy_file: Path | None,
    policy_profile: str | None,
    fmt: str,
    out_file: Path | None,
) -> None:
    """Decide from two existing run directories."""
    from suite.compare import Side, decide
    from suite.policy import load_policy
    from suite.report import render

    policy = load_policy(policy_file, policy_profile)
    decision = decide(Side.load(baseline_dir), Side.load(candidate_dir), policy)
    if out_file is not None:
        out_file.parent.mkdir(parents=True, exist_ok=True)
        out_file.write_text(render(decision, fmt), encoding="utf-8")
    finish_decision(decision, fmt)


@main.command(epilog=DECISION_EXIT_CODES)
@click.argument("roots", nargs=-1, required=True, type=click.Path(path_type=Path))
@policy_options
@click.option("--note", "notes", multiple=True, help="A line to add to the reasons (repeatable).")
@click.option(
    "--out",
    type=click.Path(path_type=Path),
    required=True,
    help="Folder for decision.json, decision.md and junit.xml.",
)
@click.option(
    "--summary",
    "summary_file",
    type=click.Path(path_type=Path, dir_okay=False),
    help="Append the Markdown report to this file (a job summary: $GITHUB_STEP_SUMMARY), cut by "
    "whole rows to keep the file under GitHub's 1 MiB limit.",
)
@click.option(
    "--full-report-url",
    metavar="URL",
    help="Where the full report lives (the run's artifacts); linked when --summary cuts rows.",
)
@format_option
@github_step_option
@handles_errors
def aggregate(
    roots: Sequence[Path],
    policy_file: Path | None,
    policy_profile: str | None,
    notes: Sequence[str],
    out: Path,
    summary_file: Path | None,
    full_report_url: str | None,
    fmt: str,
    github_step: bool,
) -> None:
    """Join the results of many ab jobs (baseline/ beside candidate/) into one decision."""
    from suite.aggregate import aggregate as join
    from suite.aggregate import job_dirs
    from suite.policy import load_policy

    policy = load_policy(policy_file, policy_profile)
    decision = join(job_dirs(roots), policy, notes=notes)
    out.mkdir(parents=True, exist_ok=True)
    write_reports(decision, out)
    if summary_file is not None:
        append_summary(decision, summary_file, full_report_url)
    finish_decision(
        decision, fmt, out=out, github_step=github_step, full_report_url=full_report_url
    )


# GitHub refuses a job summary above 1 MiB (for the whole step); a margin keeps what the
# workflow's shell adds after the report inside it.
SUMMARY_MAX_BYTES = (1 << 20) - 4096


def append_summary(decision: dict[str, Any], path: Path, full_report_url: str | None) -> int:
    """Append the report to a job summary, cut to fit beside what the file holds; returns the
    bytes written."""
    from suite.report.markdown import render_markdown

    try:
        used = path.stat().st_size if path.exists() else 0
    except OSError as exc:
        raise InputError(
            f"cannot read the summary file: {exc}", file=str(path), option="--summary"
        ) from None
    room = max(0, SUMMARY_MAX_BYTES - used)
    text = render_markdown(decision, max_bytes=room, full_report_url=full_report_url)
    data = text.encode("utf-8")
    try:
        with open(path, "ab") as fh:
            fh.write(data)
    except OSError as exc:
        raise InputError(
            f"cannot append to the summary file: {exc}", file=str(path), option="--summary"
        ) from None
    return len(data)


def _register() -> None:
    """Commands that live in their own modules, so this one stays readable."""
    from suite.cli_ci import pins_command, plan_command
    from suite.cli_repro import repro
    from suite.github.cli_comment import comment

    main.add_command(repro)
    main.add_command(comment)
    main.add_command(pins_command)
    main.add_command(plan_command)


_register()
