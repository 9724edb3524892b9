"""The sticky pull-request comment: markers, body size cap, and create-or-update on GitHub.

One comment per matrix name and PR. It is found by a hidden marker on its first line and
by its author, which must be the token's own account: a marker copied into someone else's
comment, a person's or another app's, is never edited or deleted. The second line stamps the
run's start time and the head it decided, so that a run that finishes late never replaces the
report of a run that started after it. While a newer head's run is under way, a banner says so
above the report (suite/github/banner.py).

How the token's own account is found:
  1. GET /user gives the login (personal access tokens, fine-grained tokens, app user tokens).
  2. If that is refused with 403 (installation tokens, including Actions' GITHUB_TOKEN),
     GET /app gives the slug, and the author is "<slug>[bot]".
  3. If that is refused too (installation tokens may not call /app), the author is the one
     bot the caller names: "github-actions[bot]", the account of Actions' GITHUB_TOKEN, unless
     another app's bot is named (`torch-matrix comment --author`). Only that login matches,
     never any other Bot account: a marker in dependabot's comment is not ours.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from suite.core.decision_records import DecisionRecord
from suite.core.errors import InputError
from suite.github.client import GitHubClient, GitHubError
from suite.report.markdown import render_markdown

GITHUB_BODY_LIMIT = 65536
DEFAULT_LIMIT = 65000
# The marker lives inside an HTML comment: "-->" or "--" in a name could end it early.
_NAME_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")
_REPO = re.compile(r"([A-Za-z0-9_.-]{1,100})/([A-Za-z0-9_.-]{1,100})")
_PR = re.compile(r"#?([1-9][0-9]{0,9})")
STICKY_PREFIX = "<!-- torch-matrix:sticky "
COMMIT_SHA = re.compile(r"[0-9A-Fa-f]{7,64}")  # whole or abbreviated
FULL_SHA = re.compile(r"[0-9A-Fa-f]{40}|[0-9A-Fa-f]{64}")  # SHA-1 or SHA-256
# An app's account: its slug and "[bot]"; a person's login can hold no brackets.
_BOT_LOGIN = re.compile(r"[A-Za-z0-9][A-Za-z0-9-]{0,99}\[bot\]")
ACTIONS_BOT = "github-actions[bot]"
_STAMP = re.compile(r"<!-- torch-matrix:run-started-at=(\S+?)(?: head=([0-9A-Fa-f]{7,64}))? -->")

Action = Literal["created", "updated", "unchanged", "skipped-newer"]


@dataclass(frozen=True)
class CommentOutcome:
    """What upsert_comment did; comment_id and url name the comment that now shows the report."""

    action: Action
    comment_id: int
    url: str
    deleted: tuple[int, ...] = ()


@dataclass(frozen=True)
class Author:
    """Whose comments count as ours: one login, matched case-insensitively."""

    login: str

    def owns(self, comment: dict[str, Any]) -> bool:
        user = comment.get("user")
        if not isinstance(user, dict):
            return False  # a deleted account ("ghost") is nobody's
        return str(user.get("login", "")).lower() == self.login.lower()


def parse_bot(text: str, *, option: str = "author") -> str:
    """An app's bot login, NAME[bot]: the only kind of account step 3 of the module docstring
    may take as the token's own."""
    if not _BOT_LOGIN.fullmatch(text.strip()):
        raise InputError(
            f"{option} must be an app's bot account, NAME[bot] (e.g. {ACTIONS_BOT}), got {text!r}",
            path=option,
        )
    return text.strip()


def same_commit(one: str, other: str) -> bool:
    """Whether two full SHAs name one commit. An abbreviated one never matches: the text may be
    an artifact's (the pull request's data), and a prefix ("a") would match any head."""
    return (
        bool(FULL_SHA.fullmatch(one) and FULL_SHA.fullmatch(other)) and one.lower() == other.lower()
    )


def marker(name: str) -> str:
    """The hidden first line that identifies this matrix's comment."""
    safe = re.sub(r"-{2,}", "-", _NAME_UNSAFE.sub("-", name)).strip("-.")[:100]
    return f"{STICKY_PREFIX}name={safe or 'default'} -->"


def parse_time(text: str) -> dt.datetime | None:
    try:
        # Python 3.10's fromisoformat does not read a trailing "Z".
        when = dt.datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        return None
    return when.astimezone(dt.timezone.utc) if when.tzinfo else None


def _required_time(text: str) -> dt.datetime:
    when = parse_time(text)
    if when is None:
        raise InputError(
            f"run start time must be ISO 8601 with a time zone, e.g. 2026-11-30T10:00:00Z, "
            f"got {text!r}",
            path="run_started_at",
        )
    return when


def normalize_time(text: str) -> str:
    """An ISO 8601 time with a zone, as UTC with a Z; InputError for anything else."""
    when = _required_time(text)
    spec = "microseconds" if when.microsecond else "seconds"
    return when.replace(tzinfo=None).isoformat(timespec=spec) + "Z"


def stamp(run_started_at: str, head_sha: str | None = None) -> str:
    """The hidden second line that records when the posting run started, and its head."""
    head = f" head={head_sha}" if head_sha and COMMIT_SHA.fullmatch(head_sha) else ""
    return f"<!-- torch-matrix:run-started-at={normalize_time(run_started_at)}{head} -->"


def header(name: str, run_started_at: str, head_sha: str | None = None) -> str:
    return f"{marker(name)}\n{stamp(run_started_at, head_sha)}\n"


def _lines(body: str) -> list[str]:
    return body.replace("\r\n", "\n").split("\n")


@dataclass(frozen=True)
class Shown:
    """A sticky comment read back: its header lines, the run and head its stamp names (None
    where it has none), and the lines after the header."""

    header: list[str]
    started_at: dt.datetime | None
    head: str | None
    report: list[str]

    @property
    def text(self) -> str:
        return "\n".join([*self.header, *self.report])


def shown(body: str) -> Shown:
    lines = _lines(body)
    if not lines[0].startswith(STICKY_PREFIX):
        return Shown([], None, None, lines)
    found = _STAMP.fullmatch(lines[1]) if len(lines) > 1 else None
    if found is None:
        return Shown(lines[:1], None, None, lines[1:])
    return Shown(lines[:2], parse_time(found[1]), found[2], lines[2:])


def with_header(body: str, *, name: str, run_started_at: str) -> str:
    """body behind this matrix's marker and stamp, replacing a header it already has (the head
    its stamp names is kept)."""
    was = shown(body)
    return header(name, run_started_at, was.head) + "\n".join(was.report)


def decided_head(decision: DecisionRecord, head_sha: str) -> str:
    """head_sha, the head the triggering event names, once the decision is shown to be of it.

    An artifact is the pull request's data: one that names another head, or none, is another
    run's decision (or a stale file) and is refused, never posted as this head's.
    """
    if not FULL_SHA.fullmatch(head_sha):
        raise InputError(f"head must be a full commit SHA, got {head_sha!r}", path="head_sha")
    decided = str((decision.get("source") or {}).get("head_sha") or "")
    if not decided:
        raise InputError(
            f"the decision names no head (source.head_sha), so it cannot be shown to be of "
            f"head {head_sha}: refusing to post it",
            path="source.head_sha",
        )
    if not same_commit(decided, head_sha):
        # The artifact's value is shown only when it is a SHA: it is untrusted text.
        theirs = decided if FULL_SHA.fullmatch(decided) else "a value that is not a full commit SHA"
        raise InputError(
            f"the decision is of head {theirs}, not of the run's head {head_sha}: it is "
            "another head's decision; refusing to post it",
            path="source.head_sha",
        )
    return head_sha


def comment_body(
    decision: DecisionRecord,
    *,
    name: str,
    run_started_at: str,
    full_report_url: str | None = None,
    limit: int = DEFAULT_LIMIT,
    head_sha: str | None = None,
) -> str:
    """The report with markers, at most limit characters (GitHub refuses over 65,536).

    head_sha, the head of the run that triggered the comment, is the head the stamp names; the
    decision must be of it (decided_head). Without it the stamp names the decision's own head.
    """
    if head_sha is not None:
        head = header(name, run_started_at, decided_head(decision, head_sha))
    else:
        head = header(name, run_started_at, (decision.get("source") or {}).get("head_sha"))
    room = limit - len(head)
    if room <= 0:
        raise ValueError(f"limit {limit} leaves no room for the report after the markers")
    return head + render_markdown(decision, max_chars=room, full_report_url=full_report_url)


def parse_repo(text: str, *, option: str = "repo") -> tuple[str, str]:
    """OWNER/NAME split in two; strict, because both parts become URL path segments."""
    match = _REPO.fullmatch(text.strip())
    if not match or {match[1], match[2]} & {".", ".."}:
        raise InputError(f"{option} must be OWNER/NAME, got {text!r}", path=option)
    return match[1], match[2]


def parse_pr(text: str | int, *, option: str = "pr") -> int:
    match = _PR.fullmatch(str(text).strip())
    if not match:
        raise InputError(f"{option} must be a pull-request number, got {text!r}", path=option)
    return int(match[1])


def own_author(client: GitHubClient, *, bot: str = ACTIONS_BOT) -> Author:
    """The token's own account, found as the module docstring describes; bot is step 3's."""
    for path, key, suffix in (("/user", "login", ""), ("/app", "slug", "[bot]")):
        try:
            doc = client.get(path)
        except GitHubError as exc:
            # Only "this token may not ask that" moves on: bad credentials, or a rate limit
            # that outlasted the retries, would fail every later call too. /app answers an
            # installation token with 401, as it wants an app's own JWT.
            refused = exc.status == 403 or (path == "/app" and exc.status in (401, 404))
            if refused and not exc.rate_limited:
                continue
            raise
        value = doc.get(key) if isinstance(doc, dict) else None
        if isinstance(value, str) and value:
            return Author(value + suffix)
    return Author(parse_bot(bot))


def _started(comment: dict[str, Any]) -> dt.datetime | None:
    return shown(str(comment.get("body") or "")).started_at


def upsert_comment(
    client: GitHubClient,
    repo: str,
    pr: int,
    body: str,
    *,
    name: str,
    run_started_at: str,
    author: Author | None = None,
    carry: Callable[[str, str], str] | None = None,
) -> CommentOutcome:
    """Create, update or leave this matrix's comment on the PR; collapse duplicates.

    author is the token's own account (default: own_author(client)); only its comments are
    edited or deleted.
    carry(previous body, new text) may keep a part of the comment it replaces (a later run's
    banner: suite/github/banner.py), as long as the text still fits.
    """
    owner, repo_name = parse_repo(repo)
    number = parse_pr(pr)
    ours_at = _required_time(run_started_at)
    text = with_header(body, name=name, run_started_at=run_started_at)
    if len(text) > GITHUB_BODY_LIMIT:
        raise InputError(
            f"comment body is {len(text)} characters; GitHub takes at most "
            f"{GITHUB_BODY_LIMIT}: build it with comment_body(), which truncates",
            path="body",
        )
    me = author or own_author(client)
    base = f"/repos/{owner}/{repo_name}/issues"
    first_line = marker(name)
    mine = sorted(
        (
            c
            for c in client.paginate(f"{base}/{number}/comments")
            if _lines(str(c.get("body") or ""))[0] == first_line and me.owns(c)
        ),
        key=lambda c: int(c["id"]),
    )
    if not mine:
        made = client.post(f"{base}/{number}/comments", {"body": text})
        return CommentOutcome("created", int(made["id"]), str(made["html_url"]))

    stamped = [(when, c) for c in mine if (when := _started(c)) is not None]
    newest = max(stamped, key=lambda pair: pair[0], default=None)
    if newest is not None and newest[0] > ours_at:
        # A later run owns the thread now: change nothing, not even its duplicates.
        return CommentOutcome("skipped-newer", int(newest[1]["id"]), str(newest[1]["html_url"]))

    keep, extra = mine[0], mine[1:]
    if carry is not None:
        kept = carry(str(keep.get("body") or ""), text)
        text = kept if len(kept) <= GITHUB_BODY_LIMIT else text
    action: Action = "unchanged"
    if "\n".join(_lines(str(keep.get("body") or ""))) != text:
        client.patch(f"{base}/comments/{keep['id']}", {"body": text})
        action = "updated"
    deleted = []
    for dupe in extra:
        try:
            client.delete(f"{base}/comments/{dupe['id']}")
        except GitHubError as exc:
            if exc.status != 404:  # another run deleted it first
                raise
        deleted.append(int(dupe["id"]))
    return CommentOutcome(action, int(keep["id"]), str(keep["html_url"]), tuple(deleted))
