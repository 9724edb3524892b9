"""Sticky PR comment and GitHub client, against the local fake in tests/fake_github.py.

No test reaches the network: the fake listens on 127.0.0.1 and the client's sleep and
clock are injected, so retries cost no time. Where GitHub's OpenAPI subset is present
(../shared/refs) the fake checks every request body and response it handles.
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from suite.cli.comment import comment
from suite.core.errors import InputError
from suite.core.validation import validate
from suite.github import GitHubClient, GitHubError, comment_body, marker, upsert_comment
from suite.github.comment import Author, own_author, stamp
from suite.report.escape import ZWJ
from tests.fake_github import DOCS, SPEC_FILE, FakeGitHub, OpenAPI, load_spec, simple_user
from tests.helpers import TESTS

TOKEN = "ghp_S3cretT0kenValue0123456789abcdefXYZ"
REPO, PR = "octo/widgets", 12
T1, T2, T3 = "2026-11-30T10:00:00Z", "2026-11-30T11:00:00Z", "2026-11-30T12:00:00Z"
OTHER_BOTS = ("dependabot[bot]", "other-app[bot]")
HEAD_A, HEAD_B = "a" * 40, "b" * 40
HOSTILE = "evil<img src=x onerror=alert(1)>@octocat</details>```x"
needs_refs = pytest.mark.skipif(
    not SPEC_FILE.is_file(), reason=f"GitHub OpenAPI subset not found at {SPEC_FILE}"
)


def make_decision(cells: int = 1, *, workload: str = "sdpa", message: str = "ok") -> dict[str, Any]:
    """A schema-valid decision record; a message other than 'ok' makes every cell fail."""
    verdict = "pass" if message == "ok" else "fail"
    gates = [{"gate": "status", "verdict": verdict, "severity": "hard", "message": message}]
    doc: dict[str, Any] = {
        "kind": "torch-matrix/decision",
        "schema_version": 1,
        "decision": "adopt" if verdict == "pass" else "rollback",
        "reasons": [] if verdict == "pass" else [f"{workload}: {message}"],
        "generated_at": "2026-11-30T12:30:00.000Z",
        "matrix": {"file": "matrix.yaml", "sha256": "0" * 64, "name": "nightly"},
        "policy": {"file": "policy.yaml", "sha256": "ab" * 32, "profile": "inference-service"},
        "baseline": {
            "label": "stable",
            "run_id": "20261130T090000Z-aaaaaa",
            "torch": "2.5.1",
            "dir": "b",
        },
        "candidate": {
            "label": "cand",
            "run_id": "20261130T100000Z-bbbbbb",
            "torch": "2.6.0",
            "dir": "c",
        },
        "comparable": {"ok": True, "differences": []},
        "rows": [
            {
                "row_id": f"{workload}@cuda",
                "workload": workload,
                "backend": "cuda",
                "lane": "production",
                "fleet": True,
                "decision": "adopt" if verdict == "pass" else "rollback",
                "reasons": [],
            }
        ],
        "cells": [
            {
                "cell_id": f"{workload}.case{i}@cuda",
                "row_id": f"{workload}@cuda",
                "workload": workload,
                "backend": "cuda",
                "lane": "production",
                "baseline_status": "ok",
                "candidate_status": "ok",
                "gates": gates,
            }
            for i in range(cells)
        ],
    }
    validate(doc, "torch-matrix/decision", file="<test>")
    return doc


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    # A proxy from the environment would take the requests meant for 127.0.0.1.
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")


@pytest.fixture
def fake() -> Iterator[FakeGitHub]:
    with FakeGitHub(TOKEN) as server:
        yield server
    assert server.schema_errors == []


def client_for(
    fake: FakeGitHub, sleeps: list[float] | None = None, now: float = 1e9, **kw: Any
) -> GitHubClient:
    return GitHubClient(
        environ={"GITHUB_TOKEN": TOKEN, "GITHUB_API_URL": fake.base_url},
        sleep=(sleeps if sleeps is not None else []).append,
        clock=lambda: now,
        rand=lambda: 0.5,
        **kw,
    )


def body_for(text: str, name: str = "nightly", started: str = T1) -> str:
    return f"{marker(name)}\n{stamp(started)}\n{text}"


def ours(text: str = "old report", started: str = T1) -> tuple[str, int, str, dict[str, Any]]:
    return REPO, PR, body_for(text, started=started), simple_user("matrix-bot", 7)


def test_marker_on_page_three_is_found_through_link_pagination(fake: FakeGitHub) -> None:
    for i in range(230):
        fake.add_comment(REPO, PR, f"chatter {i}", simple_user(f"dev{i % 3}", 100 + i))
    mine = fake.add_comment(*ours())
    for _ in range(20):
        fake.add_comment(REPO, PR, "more chatter", simple_user("dev0", 100))
    outcome = upsert_comment(
        client_for(fake), REPO, PR, "new report", name="nightly", run_started_at=T1
    )
    assert (outcome.action, outcome.comment_id) == ("updated", mine)
    lists = [r for r in fake.calls("GET") if r.path.endswith("/comments")]
    assert len(lists) == 3
    assert all(r.query["per_page"] == ["100"] for r in lists)
    # Pages 2 and 3 come from the Link header, which names /repositories/{id}/...
    assert [r.query.get("page") for r in lists] == [None, ["2"], ["3"]]
    assert lists[1].path.startswith("/repositories/")
    assert [r.path for r in fake.calls("PATCH")] == [f"/repos/{REPO}/issues/comments/{mine}"]
    assert not fake.calls("POST") and not fake.calls("DELETE")


def test_other_authors_marker_is_ignored_and_never_touched(fake: FakeGitHub) -> None:
    theirs = fake.add_comment(REPO, PR, body_for("spoof", started=T3), simple_user("mallory", 666))
    outcome = upsert_comment(
        client_for(fake), REPO, PR, "report", name="nightly", run_started_at=T1
    )
    assert outcome.action == "created" and outcome.comment_id != theirs
    assert not fake.calls("PATCH") and not fake.calls("DELETE")
    assert fake.comments(REPO, PR)[0]["body"] == body_for("spoof", started=T3)


def test_duplicates_collapse_to_the_oldest(fake: FakeGitHub) -> None:
    ids = [fake.add_comment(*ours(f"copy {i}")) for i in range(3)]
    other = fake.add_comment(REPO, PR, body_for("x"), simple_user("dev", 9))
    outcome = upsert_comment(client_for(fake), REPO, PR, "fresh", name="nightly", run_started_at=T2)
    assert (outcome.action, outcome.comment_id, outcome.deleted) == (
        "updated",
        ids[0],
        tuple(ids[1:]),
    )
    assert sorted(r.path.rsplit("/", 1)[1] for r in fake.calls("DELETE")) == [
        str(i) for i in ids[1:]
    ]
    assert [c["id"] for c in fake.comments(REPO, PR)] == [ids[0], other]
    assert fake.comments(REPO, PR)[0]["body"] == body_for("fresh", started=T2)


def test_unchanged_body_sends_no_patch(fake: FakeGitHub) -> None:
    client = client_for(fake)
    first = upsert_comment(client, REPO, PR, "same", name="nightly", run_started_at=T1)
    second = upsert_comment(client, REPO, PR, "same", name="nightly", run_started_at=T1)
    assert (first.action, second.action) == ("created", "unchanged")
    assert second.comment_id == first.comment_id and second.url == first.url
    assert len(fake.calls("POST")) == 1 and not fake.calls("PATCH")


def test_older_run_never_overwrites_newer_runs_comment(fake: FakeGitHub) -> None:
    client = client_for(fake)
    upsert_comment(client, REPO, PR, "from run 2", name="nightly", run_started_at=T2)
    late = upsert_comment(client, REPO, PR, "from run 1", name="nightly", run_started_at=T1)
    assert late.action == "skipped-newer" and not fake.calls("PATCH")
    assert fake.comments(REPO, PR)[0]["body"] == body_for("from run 2", started=T2)
    newer = upsert_comment(client, REPO, PR, "from run 3", name="nightly", run_started_at=T3)
    assert newer.action == "updated"


def test_other_matrix_names_keep_their_own_comments(fake: FakeGitHub) -> None:
    client = client_for(fake)
    a = upsert_comment(client, REPO, PR, "a", name="nightly", run_started_at=T1)
    b = upsert_comment(client, REPO, PR, "b", name="nightly-rocm", run_started_at=T1)
    assert a.comment_id != b.comment_id and len(fake.comments(REPO, PR)) == 2


def test_502_then_success_is_retried_with_backoff(fake: FakeGitHub) -> None:
    sleeps: list[float] = []
    fake.fail(502, {}, {"message": "Server Error"})
    outcome = upsert_comment(
        client_for(fake, sleeps), REPO, PR, "r", name="nightly", run_started_at=T1
    )
    assert outcome.action == "created"
    assert sleeps == [0.75]  # backoff 1 s x jitter factor (0.5 + 0.5 / 2)
    assert [r.status for r in fake.calls("GET")][:2] == [502, 200]


def test_429_honours_retry_after(fake: FakeGitHub) -> None:
    sleeps: list[float] = []
    fake.fail(429, {"retry-after": "7"}, {"message": "Too many requests"}, method="POST")
    outcome = upsert_comment(
        client_for(fake, sleeps), REPO, PR, "r", name="nightly", run_started_at=T1
    )
    assert outcome.action == "created" and sleeps == [7.0]
    assert [r.status for r in fake.calls("POST")] == [429, 201]


def test_403_rate_limit_waits_until_reset(fake: FakeGitHub) -> None:
    sleeps: list[float] = []
    headers = {"x-ratelimit-remaining": "0", "x-ratelimit-reset": "1000030"}
    fake.fail(403, headers, {"message": "API rate limit exceeded"}, method="GET")
    client = client_for(fake, sleeps, now=1_000_000.0)
    assert (
        upsert_comment(client, REPO, PR, "r", name="nightly", run_started_at=T1).action == "created"
    )
    assert sleeps == [31.0]  # 30 s to the reset second, plus one so the reset has happened


def test_secondary_rate_limit_is_retried(fake: FakeGitHub) -> None:
    sleeps: list[float] = []
    fake.fail(403, {}, {"message": "You have exceeded a secondary rate limit."}, method="POST")
    upsert_comment(client_for(fake, sleeps), REPO, PR, "r", name="nightly", run_started_at=T1)
    assert sleeps == [60.0]


@pytest.mark.parametrize(
    ("status", "message"),
    [
        (422, "Validation Failed"),
        (404, "Not Found"),
        (403, "Resource not accessible by integration"),
    ],
)
def test_client_errors_are_not_retried(fake: FakeGitHub, status: int, message: str) -> None:
    sleeps: list[float] = []
    error = {
        "resource": "IssueComment",
        "code": "custom",
        "field": "body",
        "message": "Body is odd",
    }
    extra = {"errors": [error]} if status == 422 else {}
    fake.fail(status, {}, {"message": message, "documentation_url": DOCS, **extra}, method="POST")
    with pytest.raises(GitHubError) as caught:
        upsert_comment(client_for(fake, sleeps), REPO, PR, "r", name="nightly", run_started_at=T1)
    assert len(fake.calls("POST")) == 1 and sleeps == []
    assert caught.value.status == status and message in caught.value.message
    assert message in str(caught.value) and (status != 422 or "Body is odd" in str(caught.value))


def test_retries_are_capped(fake: FakeGitHub) -> None:
    sleeps: list[float] = []
    for _ in range(5):
        fake.fail(503, {}, {"message": "Unavailable"}, method="GET")
    with pytest.raises(GitHubError, match="HTTP 503"):
        client_for(fake, sleeps).get("/user")
    assert len(fake.calls("GET")) == 5 and sleeps == [0.75, 1.5, 3.0, 6.0]
    fake.fail(429, {"retry-after": "3600"}, {"message": "slow down"}, method="GET")
    with pytest.raises(GitHubError, match="retry allowed in 3600 s") as caught:
        client_for(fake, sleeps).get("/user")
    assert caught.value.rate_limited and sleeps == [0.75, 1.5, 3.0, 6.0]


def test_unreachable_server_is_retried_then_reported() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed again below: nothing listens there
    sleeps: list[float] = []
    env = {"GITHUB_TOKEN": TOKEN, "GITHUB_API_URL": f"http://127.0.0.1:{port}"}
    client = GitHubClient(environ=env, sleep=sleeps.append, rand=lambda: 0.5, max_attempts=3)
    with pytest.raises(GitHubError, match=r"no answer from 127\.0\.0\.1") as caught:
        client.get("/user")
    assert caught.value.status is None and sleeps == [0.75, 1.5]


def test_next_link_to_another_host_is_not_followed(fake: FakeGitHub) -> None:
    fake.fail(200, {"Link": '<http://evil.example/steal?page=2>; rel="next"'}, [], method="GET")
    with pytest.raises(GitHubError, match="another host"):
        list(client_for(fake).paginate(f"/repos/{REPO}/issues/{PR}/comments"))


def test_oversize_report_is_cut_with_note_and_link(fake: FakeGitHub) -> None:
    decision = make_decision(400, message="tensor mismatch " * 18)
    url = "https://ci.example/runs/9/report.md"
    body = comment_body(decision, name="nightly", run_started_at=T1, full_report_url=url)
    assert 60_000 < len(body) <= 65_000
    assert body.startswith(body_for(""))
    assert "_Truncated to fit:" in body and f"[Full report]({url})" in body
    upsert_comment(client_for(fake), REPO, PR, body, name="nightly", run_started_at=T1)
    assert fake.comments(REPO, PR)[0]["body"] == body
    with pytest.raises(InputError, match="at most 65536"):
        upsert_comment(client_for(fake), REPO, PR, "x" * 70_000, name="nightly", run_started_at=T1)


def test_hostile_decision_text_is_not_posted_raw(fake: FakeGitHub) -> None:
    decision = make_decision(2, workload=HOSTILE, message=f"boom {HOSTILE}")
    body = comment_body(decision, name="nightly", run_started_at=T1)
    upsert_comment(client_for(fake), REPO, PR, body, name="nightly", run_started_at=T1)
    posted = fake.calls("POST")[0].body["body"]
    assert "<img" not in posted and "@octocat" not in posted and f"@{ZWJ}octocat" in posted
    # Markdown contexts escape each backtick; the one raw HTML line (<summary>) keeps them,
    # where they are inert: a fence opens only at the start of a line.
    assert "\\`\\`\\`x" in posted
    assert all(
        line.startswith("<details><summary>") for line in posted.splitlines() if "```" in line
    )
    assert posted.count("</details>") == posted.count("<details>") == 2


def test_marker_names_cannot_break_out_of_the_html_comment() -> None:
    assert marker("nightly") == "<!-- torch-matrix:sticky name=nightly -->"
    for name in ("a --> <b>", "--", "x\n<!--", ""):
        made = marker(name)
        assert made.count("-->") == 1 and made.endswith(" -->") and "<b>" not in made
    assert (
        stamp("2026-11-30T11:00:00+01:00")
        == "<!-- torch-matrix:run-started-at=2026-11-30T10:00:00Z -->"
    )
    with pytest.raises(InputError, match="time zone"):
        stamp("2026-11-30 10:00")


def test_ghes_base_url_with_path_prefix() -> None:
    with FakeGitHub(TOKEN, prefix="/api/v3") as fake:
        for i in range(130):
            fake.add_comment(REPO, PR, f"c{i}", simple_user("dev", 9))
        client = GitHubClient(
            environ={"GITHUB_TOKEN": TOKEN, "GITHUB_API_URL": fake.base_url + "/"}, sleep=[].append
        )
        assert client.url("/user") == fake.base_url + "/user"
        outcome = upsert_comment(client, REPO, PR, "r", name="nightly", run_started_at=T1)
    assert outcome.action == "created" and fake.schema_errors == []
    assert all(r.path.startswith("/api/v3/") and r.status < 400 for r in fake.requests)
    assert len([r for r in fake.requests if r.path.endswith("/comments")]) == 3  # 2 pages + POST
    headers = fake.requests[0].headers
    assert headers["authorization"] == f"Bearer {TOKEN}"
    assert headers["accept"] == "application/vnd.github+json"
    assert headers["x-github-api-version"] == "2022-11-28"
    assert headers["user-agent"].startswith("torch-matrix/")
    ghes = GitHubClient(
        environ={"GITHUB_TOKEN": TOKEN, "GITHUB_API_URL": "https://ghe.example/api/v3"}
    )
    assert ghes.url("repos/o/r") == "https://ghe.example/api/v3/repos/o/r"


@pytest.mark.parametrize(
    ("slug", "expected"), [("matrix-app", "matrix-app[bot]"), (None, "github-actions[bot]")]
)
def test_installation_token_falls_back_to_app_then_to_the_actions_bot(
    slug: str | None, expected: str
) -> None:
    with FakeGitHub(TOKEN, installation=True, app_slug=slug) as fake:
        human = fake.add_comment(REPO, PR, body_for("by a human"), simple_user("alice", 3))
        client = client_for(fake)
        assert own_author(client) == Author(expected)
        outcome = upsert_comment(client, REPO, PR, "r", name="nightly", run_started_at=T1)
        again = upsert_comment(client, REPO, PR, "r2", name="nightly", run_started_at=T1)
    assert outcome.action == "created" and again.action == "updated"
    assert again.comment_id == outcome.comment_id != human
    assert fake.comments(REPO, PR)[0]["body"] == body_for("by a human")


def test_another_bots_marker_is_never_edited_or_deleted() -> None:
    """With Actions' token (no /user, no /app) only github-actions[bot] is ours: another app's
    comment that carries the marker stays as it is, even one stamped later, and is not taken
    for a duplicate of ours."""
    bots = [simple_user(login, 49699333 + i, "Bot") for i, login in enumerate(OTHER_BOTS)]
    with FakeGitHub(TOKEN, installation=True) as fake:
        theirs = [
            fake.add_comment(REPO, PR, body_for(f"by {bot['login']}", started=T3), bot)
            for bot in bots
        ]
        mine = fake.add_comment(REPO, PR, body_for("old report"), fake.viewer)
        outcome = upsert_comment(
            client_for(fake), REPO, PR, "new report", name="nightly", run_started_at=T2
        )
        after = {c["id"]: c["body"] for c in fake.comments(REPO, PR)}
        assert fake.schema_errors == []
    assert (outcome.action, outcome.comment_id, outcome.deleted) == ("updated", mine, ())
    assert [r.path.rsplit("/", 1)[1] for r in fake.calls("PATCH")] == [str(mine)]
    assert not fake.calls("DELETE") and not fake.calls("POST")
    for cid, bot in zip(theirs, OTHER_BOTS, strict=True):
        assert after[cid] == body_for(f"by {bot}", started=T3)
    assert after[mine] == body_for("new report", started=T2)


def test_a_named_bot_is_ours_only_where_the_token_cannot_say_whose_it_is() -> None:
    with FakeGitHub(TOKEN) as fake:  # /user answers: the named bot changes nothing
        assert own_author(client_for(fake), bot="matrix-app[bot]") == Author("matrix-bot")
    with FakeGitHub(TOKEN, installation=True) as fake:
        assert own_author(client_for(fake), bot="Matrix-App[bot]") == Author("Matrix-App[bot]")
        assert Author("matrix-app[bot]").owns({"user": simple_user("MATRIX-APP[bot]", 1, "Bot")})
        for bad in ("alice", "dependabot", "[bot]", "a b[bot]", "x[bot][bot]"):
            with pytest.raises(InputError, match=r"NAME\[bot\]"):
                own_author(client_for(fake), bot=bad)


def test_token_is_never_shown(fake: FakeGitHub) -> None:
    client = client_for(fake)
    fake.fail(401, {}, {"message": f"Bad credentials: {TOKEN}", "documentation_url": DOCS})
    with pytest.raises(GitHubError) as caught:
        client.get("/user")
    texts = [str(caught.value), repr(caught.value), repr(client), repr(client._auth)]
    assert all(TOKEN not in t for t in texts) and "***" in str(caught.value)
    spaced = TOKEN[:10] + "\n" + TOKEN[10:]
    with pytest.raises(InputError) as bad:
        GitHubClient(environ={"GITHUB_TOKEN": spaced})
    assert TOKEN[:10] not in str(bad.value) and "GITHUB_TOKEN" in str(bad.value)


def run_cli(
    fake: FakeGitHub,
    tmp_path: Path,
    *args: str,
    env: dict[str, str] | None = None,
    source: dict[str, str] | None = None,
) -> tuple[int, str]:
    decision = tmp_path / "decision.json"
    doc = make_decision(3, message=f"fail {HOSTILE}")
    if source is not None:
        doc["source"] = source
    decision.write_text(json.dumps(doc), "utf-8")
    environ = {"GITHUB_TOKEN": TOKEN, "GITHUB_API_URL": fake.base_url, **(env or {})}
    runner = CliRunner()
    result = runner.invoke(
        comment, ["--decision", str(decision), *args], env=environ, catch_exceptions=False
    )
    text = result.output + result.stdout + result.stderr
    assert TOKEN not in text
    return result.exit_code, text


def test_cli_posts_updates_and_never_prints_the_token(fake: FakeGitHub, tmp_path: Path) -> None:
    code, text = run_cli(fake, tmp_path, "--repo", REPO, "--pr", str(PR))
    assert (
        code == 0
        and "comment created: https://github.com/octo/widgets/pull/12#issuecomment-" in text
    )
    code, text = run_cli(fake, tmp_path, "--repo", REPO, "--pr", str(PR))
    assert code == 0 and "comment unchanged:" in text
    body = fake.comments(REPO, PR)[0]["body"]
    # The marker name comes from the decision's matrix, the stamp from the later run id.
    assert body.startswith(body_for("", started="2026-11-30T10:00:00Z"))
    fake.fail(422, {}, {"message": "Validation Failed", "documentation_url": DOCS}, method="POST")
    code, text = run_cli(fake, tmp_path, "--repo", REPO, "--pr", "13")
    assert code == 3 and "Validation Failed" in text and "HTTP 422" in text


@pytest.mark.parametrize(
    ("args", "env", "expected"),
    [
        (["--repo", "octo", "--pr", "1"], {}, "--repo must be OWNER/NAME"),
        (["--repo", "../x/y", "--pr", "1"], {}, "--repo must be OWNER/NAME"),
        (["--repo", REPO, "--pr", "one"], {}, "--pr must be a pull-request number"),
        (["--repo", REPO, "--pr", "1"], {"GITHUB_TOKEN": ""}, "environment variable GITHUB_TOKEN"),
        (
            ["--repo", REPO, "--pr", "1", "--token-env", "MY_TOKEN"],
            {},
            "environment variable MY_TOKEN",
        ),
        (
            ["--repo", REPO, "--pr", "1", "--full-report-url", "javascript:x"],
            {},
            "--full-report-url",
        ),
    ],
)
def test_cli_input_errors_exit_2(
    fake: FakeGitHub, tmp_path: Path, args: list[str], env: dict[str, str], expected: str
) -> None:
    code, text = run_cli(fake, tmp_path, *args, env=env)
    assert code == 2 and expected in text and not fake.requests


def test_the_comment_names_the_events_head_and_refuses_another_heads_decision(
    fake: FakeGitHub, tmp_path: Path
) -> None:
    """The workflow passes the triggering run's head (--head-sha): the stamp names it, and an
    artifact that is another head's decision, or names none, is refused before any request."""
    args = ["--repo", REPO, "--pr", str(PR), "--run-started-at", T1, "--head-sha", HEAD_B]
    hostile = {"head_sha": f"{HEAD_A}\n::error::{HOSTILE}"}
    for source, expected in (
        ({"head_sha": HEAD_A}, f"the decision is of head {HEAD_A}, not of the run's head {HEAD_B}"),
        ({}, "the decision names no head (source.head_sha)"),
        (hostile, "the decision is of head a value that is not a full commit SHA"),
        # A prefix of the run's head matched it once (same_commit prefix-matched).
        ({"head_sha": HEAD_B[:1]}, "the decision is of head a value that is not a full commit"),
        ({"head_sha": HEAD_B[:7]}, "the decision is of head a value that is not a full commit"),
    ):
        code, text = run_cli(fake, tmp_path, *args, source=source)
        assert code == 2 and expected in text and "refusing to post it" in text, text
        assert "::error::" not in text
    assert not fake.requests  # refused before the token was read or GitHub asked
    code, text = run_cli(fake, tmp_path, *args, source={"head_sha": HEAD_B.upper()})
    assert code == 0 and "comment created" in text, text
    (posted,) = fake.comments(REPO, PR)
    assert posted["body"].split("\n")[1] == stamp(T1, HEAD_B)
    code, text = run_cli(fake, tmp_path, *args[:-1], "not-a-sha", source={"head_sha": HEAD_B})
    assert code == 2 and "head must be a full commit SHA" in text


def test_author_names_the_app_bot_whose_comments_are_ours(tmp_path: Path) -> None:
    """An app's installation token may read neither /user nor /app: --author names its bot, and
    github-actions[bot]'s marker comment is then someone else's."""
    app = simple_user("matrix-app[bot]", 77, "Bot")
    actions = simple_user("github-actions[bot]", 41898282, "Bot")
    fake = FakeGitHub(TOKEN, installation=True, app_slug="matrix-app", app_readable=False)
    with fake:
        old = body_for("old", started=T1)
        actions_comment = fake.add_comment(REPO, PR, old, actions)
        app_comment = fake.add_comment(REPO, PR, old, app)
        args = ["--repo", REPO, "--pr", str(PR), "--name", "nightly", "--run-started-at", T2]
        code, text = run_cli(fake, tmp_path, *args, "--author", "matrix-app[bot]")
        assert code == 0 and "comment updated" in text and f"-{app_comment}" in text, text
        assert [r.path.rsplit("/", 1)[1] for r in fake.calls("PATCH")] == [str(app_comment)]
        assert not fake.calls("DELETE")
        assert fake.comments(REPO, PR)[0]["body"] == old  # github-actions[bot]'s, untouched
        code, text = run_cli(fake, tmp_path, *args, "--author", "alice")
        assert code == 2 and "--author must be an app's bot account, NAME[bot]" in text
        assert fake.schema_errors == []
    assert actions_comment != app_comment


@needs_refs
def test_request_and_response_shapes_match_the_openapi_subset(fake: FakeGitHub) -> None:
    client = client_for(fake)
    for i in range(105):
        fake.add_comment(REPO, PR, f"c{i}", simple_user("dev", 9))
    upsert_comment(client, REPO, PR, "one", name="nightly", run_started_at=T1)
    upsert_comment(client, REPO, PR, "two", name="nightly", run_started_at=T2)
    # list x2 pages x2 runs, create (request + response), update (request + response), /user x2
    assert fake.checked >= 10 and fake.schema_errors == []
    spec = load_spec()
    assert spec is not None
    api = OpenAPI(spec)
    path = "/repos/{owner}/{repo}/issues/comments/{comment_id}"
    for rec in fake.calls("POST") + fake.calls("PATCH"):
        template = (
            path
            if rec.method == "PATCH"
            else "/repos/{owner}/{repo}/issues/{issue_number}/comments"
        )
        schema = api.request_schema(template, rec.method)
        assert schema is not None and api.errors(schema, rec.body) == []
    # The checks are not vacuous: wrong shapes are caught.
    request = api.request_schema(path, "PATCH")
    response = api.response_schema(path, "PATCH", 200)
    assert request is not None and api.errors(request, {"text": "x"})
    assert response is not None and api.errors(response, {"id": "1", "body": 2})


REAL = TESTS / "fixtures" / "decisions" / "pr-check.json"  # see the golden test below


def test_the_comment_of_a_real_run_matches_its_golden_and_opens_with_three_lines() -> None:
    """The decision of tests/test_act_e2e.py::test_pull_request_to_sticky_comment (images of
    torch 2.13.0 and 2.14.1, the team plugin failing on the candidate, cuda not planned, the
    plugin dropped from the head's matrix), aggregated by the workflow's command line. Refresh
    both files after an intended change to the report: copy the run's decision.json here (or
    aggregate its artifacts again), then rerun with UPDATE_GOLDEN=1 and read the diff."""
    decision = json.loads(REAL.read_text())
    source = decision["source"]
    body = comment_body(
        decision,
        name="pr-check",
        run_started_at="2026-12-03T14:30:00Z",
        full_report_url=source["run_url"],
    )
    golden = TESTS / "golden" / "comment_pr-check.md"
    if os.environ.get("UPDATE_GOLDEN") == "1" and body != golden.read_text(encoding="utf-8"):
        golden.write_text(body, encoding="utf-8")
        pytest.fail(f"{golden} rewritten; review the diff, then rerun without UPDATE_GOLDEN")
    assert body == golden.read_text(encoding="utf-8")
    visible = [line for line in body.splitlines() if not line.startswith("<!--")]
    first, second, third = visible[:3]
    assert first == "## torch-matrix: **ROLLBACK** · matrix pr\\-check"
    assert f"base `{source['base_sha'][:10]}` → head `{source['head_sha'][:10]}`" in second
    assert "torch 2\\.13\\.0\\+cpu → 2\\.14\\.1" in second and "decided 2026\\-12\\-03" in second
    assert second.endswith(f"[run]({source['run_url']})\\")  # a hard line break
    assert "policy profile research" in third and "(run 2026" in third
    reasons = body.split("\n\n")[1]
    assert "- team\\_bench@cpu → rollback: team\\_bench\\.8@cpu" in reasons  # names its row
    assert "not planned, no runners named: cuda" in reasons
    assert "removes 1 cell, which still ran: team\\_bench\\.8@cpu" in reasons
    assert "| team\\_bench@cpu | production | rollback | new\\-failure \\(hard\\) |" in body
    assert "docker run" in body and "--param" not in body
