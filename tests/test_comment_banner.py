"""The banner above a sticky comment that shows an earlier head's decision, against the local
GitHub stand-in: set as a newer head's run starts, replaced by that run's decision, turned to
"decided nothing" when the run ends without one, and the same whichever of the two events' jobs
runs first. The token's own comments only, of every matrix; never a new comment."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from suite.github import upsert_comment
from suite.github.banner import HeadRun, carried, mark_comments
from suite.github.comment import comment_body, parse_time, shown
from tests.fake_github import FakeGitHub, simple_user
from tests.helpers import cli
from tests.test_comment_renders import problems, read
from tests.test_github_comment import PR, REPO, T1, T2, T3, TOKEN, client_for, make_decision

HEAD_A, HEAD_B, HEAD_C = "a" * 40, "b" * 40, "c" * 40
RUN_URL = "https://github.com/octo/widgets/actions/runs/{}"


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")


@pytest.fixture
def fake() -> Iterator[FakeGitHub]:
    with FakeGitHub(TOKEN) as server:
        yield server
    assert server.schema_errors == []


def decided(fake: FakeGitHub, head: str, started: str, name: str = "nightly") -> int:
    """Post the decision of a run of `head` that started at `started`, as the workflow does."""
    decision: dict[str, Any] = make_decision()
    decision["source"] = {"base_sha": "0" * 40, "head_sha": head, "run_url": RUN_URL.format(1)}
    body = comment_body(decision, name=name, run_started_at=started)
    out = upsert_comment(
        client_for(fake), REPO, PR, body, name=name, run_started_at=started, carry=carried
    )
    return out.comment_id


def run(started: str, head: str, number: int = 2, conclusion: str | None = None) -> HeadRun:
    return HeadRun(started, head, RUN_URL.format(number), conclusion)


def body(fake: FakeGitHub, cid: int) -> str:
    return str(next(c for c in fake.comments(REPO, PR) if c["id"] == cid)["body"])


def first_visible(text: str) -> str:
    return next(line for line in text.splitlines() if not line.startswith("<!--"))


def test_a_newer_heads_run_marks_the_comment_until_its_decision_replaces_it(
    fake: FakeGitHub,
) -> None:
    cid = decided(fake, HEAD_A, T1)
    before = body(fake, cid)
    assert shown(before).head == HEAD_A  # the stamp names the head it decided
    marks = mark_comments(client_for(fake), REPO, PR, "running", run(T2, HEAD_B))
    assert [(m.change, m.comment_id) for m in marks] == [("marked", cid)]
    now = body(fake, cid)
    assert first_visible(now).startswith("> **A run for head `bbbbbbbbbb` is in progress**")
    assert RUN_URL.format(2) in first_visible(now)
    # everything the comment said is still there, below the banner
    assert now.splitlines()[:2] == before.splitlines()[:2]
    assert now.endswith(before.split("\n", 2)[2])
    page = read(now)  # as GitHub renders it: the banner, then the report as it was
    assert page.headings[0].startswith("torch-matrix: ADOPT") and problems(now) == []
    assert "".join(page.prose).lstrip().startswith("A run for head  is in progress")  # code aside
    again = mark_comments(client_for(fake), REPO, PR, "running", run(T2, HEAD_B))
    assert [m.change for m in again] == ["unchanged"] and len(fake.calls("PATCH")) == 1
    decided(fake, HEAD_B, T2)
    assert "in progress" not in body(fake, cid) and shown(body(fake, cid)).head == HEAD_B


@pytest.mark.parametrize("order", ["running-first", "ended-first"])
def test_a_run_that_decided_nothing_leaves_ended_whichever_job_ran_first(
    fake: FakeGitHub, order: str
) -> None:
    cid = decided(fake, HEAD_A, T1)
    client = client_for(fake)
    states = ["running", "ended"] if order == "running-first" else ["ended", "running"]
    for state in states:
        mark_comments(client, REPO, PR, state, run(T2, HEAD_B, conclusion="cancelled"))  # type: ignore[arg-type]
    said = first_visible(body(fake, cid))
    assert said.startswith("> **The run for head `bbbbbbbbbb` decided nothing for this matrix**")
    assert "cancelled" in said and "in progress" not in body(fake, cid)
    assert body(fake, cid).count("torch-matrix:banner") == 1 and problems(body(fake, cid)) == []


def test_what_a_banner_leaves_alone(fake: FakeGitHub) -> None:
    client = client_for(fake)
    same_head = decided(fake, HEAD_A, T1, name="same-head")
    later = decided(fake, HEAD_C, T3, name="later")
    human = fake.add_comment(REPO, PR, body(fake, same_head), simple_user("mallory", 666))
    fake.add_comment(REPO, PR, "LGTM", simple_user("dev", 9))
    marks = mark_comments(client, REPO, PR, "running", run(T2, HEAD_A))
    why = {m.comment_id: (m.change, m.why) for m in marks}
    assert why[same_head] == ("left", "it shows this head's decision")
    assert why[later] == ("left", "it shows the decision of this run or a later one")
    assert human not in why and len(why) == 2 and not fake.calls("PATCH")


def test_another_bots_marker_comment_is_never_marked() -> None:
    """With Actions' token only github-actions[bot]'s comments are the workflow's own: another
    app's comment that carries the marker keeps what it says."""
    with FakeGitHub(TOKEN, installation=True) as fake:
        mine = decided(fake, HEAD_A, T1)
        theirs = {
            login: fake.add_comment(
                REPO, PR, body(fake, mine), simple_user(login, 49699333 + i, "Bot")
            )
            for i, login in enumerate(("dependabot[bot]", "other-app[bot]"))
        }
        before = {cid: body(fake, cid) for cid in theirs.values()}
        marks = mark_comments(client_for(fake), REPO, PR, "running", run(T2, HEAD_B))
        assert [(m.change, m.comment_id) for m in marks] == [("marked", mine)]
        assert {cid: body(fake, cid) for cid in theirs.values()} == before
        assert "in progress" in body(fake, mine) and fake.schema_errors == []


def test_an_earlier_runs_banner_never_replaces_a_later_ones(fake: FakeGitHub) -> None:
    cid = decided(fake, HEAD_A, T1)
    client = client_for(fake)
    mark_comments(client, REPO, PR, "running", run(T3, HEAD_C, number=3))
    late = mark_comments(client, REPO, PR, "ended", run(T2, HEAD_B))
    assert [(m.change, m.why) for m in late] == [("left", "a later run's banner is on it")]
    assert "`cccccccccc` is in progress" in body(fake, cid)
    # a later run's banner does replace an earlier one's
    mark_comments(client, REPO, PR, "ended", run("2026-11-30T13:00:00Z", HEAD_B, number=4))
    assert "`cccccccccc`" not in body(fake, cid) and body(fake, cid).count("banner") == 1


def test_an_earlier_runs_decision_keeps_the_banner_of_a_later_run(fake: FakeGitHub) -> None:
    """Run 2 (head B) finishes after run 3 (head C) started: its decision replaces head A's, and
    the comment still says that head C's run is under way; run 3's own decision then clears it."""
    cid = decided(fake, HEAD_A, T1)
    mark_comments(client_for(fake), REPO, PR, "running", run(T3, HEAD_C, 3))
    decided(fake, HEAD_B, T2)
    now = body(fake, cid)
    assert shown(now).head == HEAD_B and shown(now).started_at == parse_time(T2)
    assert first_visible(now).startswith("> **A run for head `cccccccccc` is in progress**")
    assert problems(now) == [] and read(now).headings[0].startswith("torch-matrix: ADOPT")
    decided(fake, HEAD_C, T3)
    assert "in progress" not in body(fake, cid) and shown(body(fake, cid)).head == HEAD_C


def test_a_decision_drops_a_banner_of_its_own_run_its_head_or_an_earlier_run(
    fake: FakeGitHub,
) -> None:
    cid = decided(fake, HEAD_A, T1)
    mark_comments(client_for(fake), REPO, PR, "running", run(T2, HEAD_B))
    decided(fake, HEAD_B, T2)  # the banner's own run
    assert "in progress" not in body(fake, cid)
    mark_comments(client_for(fake), REPO, PR, "running", run(T3, HEAD_C, 3))
    decided(fake, HEAD_C, T2)  # another run of the banner's head, started earlier
    assert "in progress" not in body(fake, cid) and shown(body(fake, cid)).head == HEAD_C


def test_every_matrix_comment_is_marked_and_none_is_created(fake: FakeGitHub) -> None:
    ids = [decided(fake, HEAD_A, T1, name=name) for name in ("pr-check", "nightly-gpu")]
    marks = mark_comments(client_for(fake), REPO, PR, "running", run(T2, HEAD_B))
    assert sorted(m.comment_id for m in marks if m.change == "marked") == sorted(ids)
    empty = mark_comments(client_for(fake), REPO, PR + 1, "running", run(T2, HEAD_B))
    assert empty == [] and not fake.calls("POST")[2:]  # the two decisions' posts only


def test_the_command_marks_and_refuses_what_it_cannot_tell(
    fake: FakeGitHub, monkeypatch: pytest.MonkeyPatch
) -> None:
    cid = decided(fake, HEAD_A, T1)
    monkeypatch.setenv("GITHUB_TOKEN", TOKEN)
    monkeypatch.setenv("GITHUB_API_URL", fake.base_url)
    common = ["comment", "--repo", REPO, "--pr", str(PR), "--run-started-at", T2]
    link = ["--full-report-url", RUN_URL.format(2)]
    code, out, err = cli(*common, "--run-state", "running", "--head-sha", HEAD_B, *link)
    assert code == 0, err
    assert f"comment marked: https://github.com/{REPO}/pull/{PR}#issuecomment-{cid}" in out
    for argv, fault in (
        ([*common, "--run-state", "running", *link], "--head-sha"),
        ([*common, "--run-state", "ended", "--head-sha", "not-a-sha", *link], "commit SHA"),
        ([*common, "--run-state", "ended", "--head-sha", HEAD_B], "--full-report-url"),
        ([*common, "--run-state", "ended", "--decision", "d.json", *link], "not both"),
        ([*common, *link], "not both"),
    ):
        code, _, err = cli(*argv)
        assert code == 2 and fault in err, (argv, err)
    assert len(fake.calls("PATCH")) == 1


def test_the_command_posting_a_decision_keeps_a_later_runs_banner(
    fake: FakeGitHub, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    cid = decided(fake, HEAD_A, T1, name="default")
    mark_comments(client_for(fake), REPO, PR, "running", run(T3, HEAD_C, 3))
    decision: dict[str, Any] = make_decision()
    decision["source"] = {"base_sha": "0" * 40, "head_sha": HEAD_B, "run_url": RUN_URL.format(2)}
    file = tmp_path / "decision.json"
    file.write_text(json.dumps(decision))
    monkeypatch.setenv("GITHUB_TOKEN", TOKEN)
    monkeypatch.setenv("GITHUB_API_URL", fake.base_url)
    code, out, err = cli(
        "comment", "--decision", str(file), "--repo", REPO, "--pr", str(PR),
        "--run-started-at", T2, "--name", "default", "--head-sha", HEAD_B,
    )  # fmt: skip
    assert code == 0 and "comment updated" in out, err
    now = body(fake, cid)
    assert shown(now).head == HEAD_B
    assert first_visible(now).startswith("> **A run for head `cccccccccc` is in progress**")
