"""The `torch-matrix comment` command: post a decision record as the sticky PR comment, or
mark the comments of earlier heads while a run is under way or after it decided nothing."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import click

from suite.cli.edge import handles_errors
from suite.core.decision_records import DecisionRecord
from suite.core.errors import InputError
from suite.github.banner import STATES
from suite.report.escape import plain

if TYPE_CHECKING:
    from suite.github.banner import HeadRun
    from suite.github.client import GitHubClient

EXIT_CODES = """\b
Exit codes:
  0  the comment was created, updated, already current, or left to a newer run
  2  invalid input: decision file (or a decision of another head than --head-sha), --repo,
     --pr, --full-report-url, --author, --run-state and its options, or no token
  3  GitHub refused or could not be reached (the message carries GitHub's reason)"""

_RUN_ID_TIME = re.compile(r"(\d{4})(\d{2})(\d{2})T(\d{2})(\d{2})(\d{2})Z-")


def default_started_at(decision: DecisionRecord) -> str:
    """The later side's run start, from run ids like 20250102T000000Z-bbbbbb.

    The later start is the run this report is about (a baseline may be an older, cached
    run); generated_at, the time of the comparison, is the fallback.
    """
    stamps = []
    for side in ("baseline", "candidate"):
        found = _RUN_ID_TIME.match(str(decision[side].get("run_id", "")))
        if found:
            y, mo, d, h, mi, s = found.groups()
            stamps.append(f"{y}-{mo}-{d}T{h}:{mi}:{s}Z")
    return max(stamps) if stamps else str(decision["generated_at"])


def _post(
    decision_file: Path | None,
    repo: str,
    pr_text: str,
    name: str | None,
    full_report_url: str | None,
    run_started_at: str | None,
    token_env: str,
    run_state: str | None,
    head_sha: str | None,
    conclusion: str | None,
    author: str | None,
) -> None:
    from suite.github.banner import carried
    from suite.github.client import GitHubClient
    from suite.github.comment import (
        ACTIONS_BOT,
        comment_body,
        own_author,
        parse_bot,
        parse_pr,
        parse_repo,
        upsert_comment,
    )
    from suite.untrusted.decision import read_decision

    parse_repo(repo, option="--repo")
    bot = parse_bot(author, option="--author") if author is not None else ACTIONS_BOT
    pr = parse_pr(pr_text, option="--pr")
    if full_report_url is not None and urlsplit(full_report_url).scheme not in ("http", "https"):
        raise InputError(
            f"--full-report-url must be an http(s) URL, got {full_report_url!r}",
            option="--full-report-url",
        )
    if (decision_file is None) == (run_state is None):
        raise InputError("give --decision, or --run-state, not both", option="--decision")
    if run_state is not None:
        run = _head_run(run_started_at, head_sha, full_report_url, conclusion)
        _mark(repo, pr, run_state, run, GitHubClient(token_env=token_env), bot)
        return
    assert decision_file is not None
    decision = read_decision(decision_file)  # the room's reader: data, bounded, valid
    matrix: dict[str, Any] = dict(decision.get("matrix") or {})
    name = name or str(matrix.get("name") or "default")
    started = run_started_at or default_started_at(decision)
    # The head is the event's (--head-sha): a decision of another head is refused here.
    body = comment_body(
        decision,
        name=name,
        run_started_at=started,
        full_report_url=full_report_url,
        head_sha=head_sha,
    )
    # The client reads the token; it is never passed around or echoed from here.
    client = GitHubClient(token_env=token_env)
    me = own_author(client, bot=bot)
    outcome = upsert_comment(
        client, repo, pr, body, name=name, run_started_at=started, author=me, carry=carried
    )
    click.echo(f"comment {outcome.action}: {plain(outcome.url)}")
    if outcome.deleted:
        click.echo(f"deleted duplicate comments: {', '.join(map(str, outcome.deleted))}")


def _head_run(
    started_at: str | None, head_sha: str | None, url: str | None, conclusion: str | None
) -> HeadRun:
    from suite.github.banner import HeadRun

    for option, value in (
        ("--run-started-at", started_at), ("--head-sha", head_sha), ("--full-report-url", url)
    ):  # fmt: skip
        if not value:
            raise InputError(f"--run-state needs {option}: the run it speaks of", option=option)
    assert started_at and head_sha and url
    return HeadRun(started_at, head_sha, url, conclusion or None)


def _mark(repo: str, pr: int, state: str, run: HeadRun, client: GitHubClient, bot: str) -> None:
    from suite.github.banner import mark_comments
    from suite.github.comment import own_author

    me = own_author(client, bot=bot)
    marks = mark_comments(
        client, repo, pr, "running" if state == "running" else "ended", run, author=me
    )
    if not marks:
        click.echo("no comment of an earlier head to mark")
    for mark in marks:
        click.echo(f"comment {mark.change}: {plain(mark.url)} ({plain(mark.why)})")


@click.command(epilog=EXIT_CODES)
@click.option(
    "--decision",
    "decision_file",
    type=click.Path(path_type=Path),
    help="decision.json written by compare or ab.",
)
@click.option("--repo", required=True, metavar="OWNER/NAME", help="Repository of the PR.")
@click.option("--pr", "pr_text", required=True, metavar="N", help="Pull-request number.")
@click.option(
    "--name",
    metavar="NAME",
    help="Matrix name in the comment marker; one comment per name. "
    "Default: the decision's matrix name, else 'default'.",
)
@click.option("--full-report-url", metavar="URL", help="Linked when the report is truncated.")
@click.option(
    "--run-started-at",
    metavar="TIME",
    help="ISO 8601 start of this CI run; a comment from a later-started run is left alone. "
    "Default: the start of the later side's run, from its run id.",
)
@click.option(
    "--run-state",
    type=click.Choice(STATES),
    help="Instead of a decision: mark each sticky comment of an earlier head with this run "
    "(--run-started-at, --head-sha, --full-report-url: its link), 'running' as it starts, "
    "'ended' when it decided nothing for that comment's matrix.",
)
@click.option(
    "--head-sha",
    metavar="SHA",
    help="The head commit of the run (the triggering event's). With --decision, the decision "
    "must be of it (its source.head_sha), else nothing is posted; the comment's stamp names it. "
    "Needed with --run-state.",
)
@click.option(
    "--conclusion",
    metavar="WORD",
    help="With --run-state ended: how the run ended (success, failure, cancelled, ...).",
)
@click.option(
    "--author",
    metavar="LOGIN",
    help="The app bot (NAME[bot]) whose comments are this token's own, when the token can "
    "name neither its user nor its app (an installation token). Default: github-actions[bot], "
    "the account of Actions' GITHUB_TOKEN. A marker in any other account's comment is never "
    "edited or deleted.",
)
@click.option(
    "--token-env",
    default="GITHUB_TOKEN",
    show_default=True,
    metavar="VAR",
    help="Environment variable holding the token. GITHUB_API_URL sets the API (GHES).",
)
def comment(**options: Any) -> None:
    """Create or update the sticky pull-request comment with the decision report, or mark
    the comments of earlier heads while a newer run is under way (--run-state)."""
    handles_errors(_post)(**options)  # the options, by name, are _post's parameters
