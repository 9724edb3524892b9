"""GitHub integration: a small REST client and the sticky pull-request comment."""

from __future__ import annotations

from suite.github.client import GitHubClient, GitHubError
from suite.github.comment import CommentOutcome, comment_body, marker, upsert_comment

__all__ = [
    "CommentOutcome",
    "GitHubClient",
    "GitHubError",
    "comment_body",
    "marker",
    "upsert_comment",
]
