"""The line above a sticky comment while it shows an earlier head's decision.

A pull request's comment shows the decision of the run that posted it. When a run for a newer
head starts, the comment workflow (on the workflow_run `requested` event) marks every comment of
an earlier head "running" with the new run's link; the run's decision then replaces the whole
comment, banner and all. A run that ends without deciding a matrix (it found no torch change,
failed before deciding, or was cancelled) turns that matrix's banner into "ended, decided
nothing", so no comment says "running" for a run that is over.

The banner is a hidden marker line (state, the run's start, its head) and one quoted line,
between the comment's header and its report. Which banner wins does not depend on the order in
which the two events' jobs run: a comment that shows this run's decision or a later run's, or
whose head is the run's own, is left alone; a later run's banner is never replaced by an earlier
run's; and "ended" is never turned back into "running" for the same run. When an earlier run's
decision replaces a comment that carries a later run's banner (the earlier run finished after
the later one started), the banner stays above the new decision (`carried`).
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass
from typing import Any, Literal

from suite.core.errors import InputError
from suite.github.client import GitHubClient
from suite.github.comment import (
    COMMIT_SHA,
    STICKY_PREFIX,
    Author,
    Shown,
    normalize_time,
    own_author,
    parse_pr,
    parse_repo,
    parse_time,
    same_commit,
    shown,
)
from suite.report.escape import md

State = Literal["running", "ended"]
STATES: tuple[State, ...] = ("running", "ended")
_BANNER = re.compile(
    r"<!-- torch-matrix:banner state=(running|ended) run-started-at=(\S+)(?: head=(\w+))? -->"
)

Change = Literal["marked", "unchanged", "left"]


@dataclass(frozen=True)
class HeadRun:
    """The run a banner speaks of: when it started, which head it runs, where to read it."""

    started_at: str
    head_sha: str
    url: str
    conclusion: str | None = None  # for an ended run: success, failure, cancelled, ...

    def __post_init__(self) -> None:
        object.__setattr__(self, "started_at", normalize_time(self.started_at))
        if not COMMIT_SHA.fullmatch(self.head_sha):
            raise InputError(f"head must be a commit SHA, got {self.head_sha!r}", path="head_sha")


@dataclass(frozen=True)
class Marked:
    """What happened to one comment: marked (its banner written), unchanged, or left alone."""

    change: Change
    comment_id: int
    url: str
    why: str


def banner(state: State, run: HeadRun) -> str:
    """The marker line and the quoted line a reader sees, with the blank line after them."""
    when = parse_time(run.started_at)
    at = when.strftime("%Y-%m-%d %H:%M UTC") if when else run.started_at
    link = f"[run]({run.url})"
    head = f"`{run.head_sha[:10]}`"
    if state == "running":
        said = (
            f"> **A run for head {head} is in progress** ({link}, started {md(at)}); the "
            "decision below is of an earlier head\\."
        )
    else:
        how = f", {md(run.conclusion)}" if run.conclusion else ""
        said = (
            f"> **The run for head {head} decided nothing for this matrix** ({link}{how}): it "
            "changed no torch pin, or ended before deciding; the decision below is of an "
            "earlier head\\."
        )
    hidden = f"<!-- torch-matrix:banner state={state} run-started-at={run.started_at}"
    return f"{hidden} head={run.head_sha} -->\n{said}\n\n"


@dataclass(frozen=True)
class _Banner:
    state: State
    started_at: dt.datetime
    head: str | None


def _current(lines: list[str]) -> _Banner | None:
    found = _BANNER.fullmatch(lines[0]) if lines else None
    when = parse_time(found[2]) if found else None
    if found is None or when is None:
        return None
    state: State = "running" if found[1] == "running" else "ended"
    return _Banner(state, when, found[3])


def _verdict(state: State, run: HeadRun, comment: Shown) -> str | None:
    """Why the comment keeps what it shows, or None when it takes this banner."""
    at = parse_time(run.started_at)
    assert at is not None  # normalized in HeadRun
    if comment.started_at is not None and comment.started_at >= at:
        return "it shows the decision of this run or a later one"
    if comment.head is not None and same_commit(comment.head, run.head_sha):
        return "it shows this head's decision"
    now = _current(comment.report)
    if now is not None and now.started_at > at:
        return "a later run's banner is on it"
    if now is not None and now.started_at == at and now.state == "ended" and state == "running":
        return "this run has already ended"
    return None


def with_banner(comment: Shown, state: State, run: HeadRun) -> str:
    """The comment's text with this banner in place of any banner it had."""
    report = comment.report
    if _current(report) is not None:
        report = report[3:] if len(report) > 2 and report[2] == "" else report[2:]
    return "\n".join([*comment.header, banner(state, run).rstrip("\n"), "", *report])


def carried(previous: str, text: str) -> str:
    """TEXT, a decision's new comment, with the banner of PREVIOUS (the comment it replaces)
    kept where that banner speaks of a run that started after the decision's run and of
    another head: the new decision is still an earlier head's while that run is under way, or
    after it ended deciding nothing."""
    old, new = shown(previous), shown(text)
    now = _current(old.report)
    if now is None or new.started_at is None or now.started_at <= new.started_at:
        return text
    if now.head is not None and new.head is not None and same_commit(now.head, new.head):
        return text
    return "\n".join([*new.header, *old.report[:2], "", *new.report])


def mark_comments(
    client: GitHubClient,
    repo: str,
    pr: int | str,
    state: State,
    run: HeadRun,
    *,
    author: Author | None = None,
) -> list[Marked]:
    """Put this banner on each of the token's own sticky comments on the pull request, of any
    matrix, that shows an earlier head's decision; never create a comment. author is the
    token's own account (default: own_author(client))."""
    owner, name = parse_repo(repo)
    number = parse_pr(pr)
    me = author or own_author(client)
    base = f"/repos/{owner}/{name}/issues"
    done = []
    for comment in client.paginate(f"{base}/{number}/comments"):
        body = str(comment.get("body") or "")
        if not body.startswith(STICKY_PREFIX) or not me.owns(comment):
            continue
        done.append(_mark_one(client, base, comment, state, run))
    return done


def _mark_one(
    client: GitHubClient, base: str, comment: dict[str, Any], state: State, run: HeadRun
) -> Marked:
    cid, url = int(comment["id"]), str(comment.get("html_url") or "")
    seen = shown(str(comment.get("body") or ""))
    why = _verdict(state, run, seen)
    if why is not None:
        return Marked("left", cid, url, why)
    text = with_banner(seen, state, run)
    if text == seen.text:
        return Marked("unchanged", cid, url, f"the {state} banner of this run is on it")
    client.patch(f"{base}/comments/{cid}", {"body": text})
    return Marked("marked", cid, url, f"{state}: {run.url}")
