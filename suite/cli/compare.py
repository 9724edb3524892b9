"""The commands that decide from results already run: compare judges two run directories,
aggregate joins the jobs of a fanned-out matrix; and finish_decision, how every deciding
command (ab too) ends."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path

import click

from suite.cli.edge import handles_errors
from suite.cli.options import (
    DECISION_EXIT_CODES,
    format_option,
    github_step_option,
    policy_options,
)
from suite.core.decision_records import DecisionRecord, Source
from suite.github.outputs import append_summary, step_outputs_on_error
from suite.report import write_reports


def finish_decision(
    decision: DecisionRecord,
    fmt: str,
    *,
    out: Path | None = None,
    github_step: bool = False,
    full_report_url: str | None = None,
) -> None:
    from suite.github.outputs import write_github_output
    from suite.judge.rules import exit_code
    from suite.report import render

    click.echo(render(decision, fmt))
    if not github_step:
        sys.exit(exit_code(decision["decision"]))
    outputs: dict[str, str] = {"decision": decision["decision"]}
    if out is not None:
        outputs["results-path"] = str(out)
    write_github_output(outputs)
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary:
        append_summary(decision, Path(summary), full_report_url)
    sys.exit(0)


@click.command(epilog=DECISION_EXIT_CODES)
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
    from suite.core.loaded import LoadedRun
    from suite.flows.compare import decide
    from suite.judge.policy import load_policy
    from suite.report import render

    policy = load_policy(policy_file, policy_profile)
    decision = decide(LoadedRun.load(baseline_dir), LoadedRun.load(candidate_dir), policy)
    if out_file is not None:
        out_file.parent.mkdir(parents=True, exist_ok=True)
        out_file.write_text(render(decision, fmt), encoding="utf-8")
    finish_decision(decision, fmt)


@click.command(epilog=DECISION_EXIT_CODES)
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
@click.option("--base-sha", metavar="SHA", help="The base commit, named in the report's head.")
@click.option("--head-sha", metavar="SHA", help="The head commit, named in the report's head.")
@click.option(
    "--plan",
    "plan_file",
    type=click.Path(path_type=Path, dir_okay=False),
    help="The plan the jobs were made from (the strategy matrix `plan` printed, as JSON): every "
    "planned cell that no job reported is untested with the reason, and the decision is then "
    "at least defer.",
)
@click.option(
    "--jobs-result",
    metavar="RESULT",
    help="What the workflow says of the bench jobs (needs.bench.result), named beside a job "
    "that did not report.",
)
@click.option(
    "--pins",
    nargs=2,
    metavar="BASELINE CANDIDATE",
    help="With --plan: the two torch pins, named in the decision when no job reported.",
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
    base_sha: str | None,
    head_sha: str | None,
    plan_file: Path | None,
    jobs_result: str | None,
    pins: tuple[str, str] | None,
    fmt: str,
    github_step: bool,
) -> None:
    """Join the results of many ab jobs (baseline/ beside candidate/) into one decision.

    With --plan, the results are checked against the jobs and cells the plan made: a job that
    failed, was cancelled or timed out, or a cell missing from a job's results, is untested
    with the reason, and never adopt."""
    from suite.flows.accounting import load_plan
    from suite.flows.aggregate import Planned
    from suite.flows.aggregate import aggregate as join
    from suite.judge.policy import load_policy
    from suite.untrusted.artifacts import job_folders

    with step_outputs_on_error(github_step, out):
        policy = load_policy(policy_file, policy_profile)
        planned = None
        if plan_file is not None:
            planned = Planned(load_plan(plan_file), jobs_result, pins or ("unknown", "unknown"))
        found = job_folders(roots, required=planned is None)
        decision = join(
            found.jobs, policy, notes=notes, planned=planned, strays=found.stray_lines()
        )
        source: Source = {}  # what the report's first lines name: commits and run
        if base_sha:
            source["base_sha"] = base_sha
        if head_sha:
            source["head_sha"] = head_sha
        if full_report_url:
            source["run_url"] = full_report_url
        if source:
            decision["source"] = source
        out.mkdir(parents=True, exist_ok=True)
        write_reports(decision, out)
        if summary_file is not None:
            append_summary(decision, summary_file, full_report_url)
        finish_decision(
            decision, fmt, out=out, github_step=github_step, full_report_url=full_report_url
        )
