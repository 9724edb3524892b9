"""A fake GitHub REST server on 127.0.0.1 for the comment tests: issue comments, /user, /app.

It keeps comments in memory, paginates with real Link headers (pointing, like GitHub, at
/repositories/{id}/... rather than the path that was asked for), can be told to answer
the next requests with scripted failures, and records every request. When GitHub's
OpenAPI subset is present it checks request bodies and its own responses against it and
collects the problems in schema_errors, which the tests assert to be empty.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

REFS = Path(__file__).resolve().parents[2] / "shared" / "refs"
SPEC_FILE = REFS / "gh-openapi-subset.json"
DOCS = "https://docs.github.com/rest"
LIST = "/repos/{owner}/{repo}/issues/{issue_number}/comments"
ONE = "/repos/{owner}/{repo}/issues/comments/{comment_id}"
_ISSUE = re.compile(r"/repos/([^/]+)/([^/]+)/issues/(\d+)/comments")
_BY_ID = re.compile(r"/repositories/(\d+)/issues/(\d+)/comments")
_COMMENT = re.compile(r"/repos/([^/]+)/([^/]+)/issues/comments/(\d+)")
_T0 = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)


def load_spec() -> dict[str, Any] | None:
    return json.loads(SPEC_FILE.read_text("utf-8")) if SPEC_FILE.is_file() else None


class OpenAPI:
    """Schema checks against the subset; $refs resolve into its #/components."""

    def __init__(self, spec: dict[str, Any]) -> None:
        from openapi_schema_validator import OAS30Validator, oas30_format_checker

        self.spec = spec
        self._cls, self._formats = OAS30Validator, oas30_format_checker

    def errors(self, schema: dict[str, Any], instance: Any) -> list[str]:
        root = {**schema, "components": self.spec["components"]}
        validator = self._cls(root, format_checker=self._formats)
        return [f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(instance)]

    def _resolve(self, node: dict[str, Any]) -> dict[str, Any]:
        while "$ref" in node:
            *_, section, name = node["$ref"].split("/")
            node = self.spec["components"][section][name]
        return node

    def request_schema(self, template: str, method: str) -> dict[str, Any] | None:
        op = self.spec["paths"][template][method.lower()]
        body = op.get("requestBody")
        return body["content"]["application/json"]["schema"] if body else None

    def response_schema(self, template: str, method: str, status: int) -> dict[str, Any] | None:
        op = self.spec["paths"][template][method.lower()]
        response = op["responses"].get(str(status))
        if response is None:
            return None
        content = self._resolve(response).get("content", {}).get("application/json")
        return content["schema"] if content else None


@dataclass
class Recorded:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: Any
    status: int = 0


@dataclass
class Scripted:
    status: int
    headers: dict[str, str] = field(default_factory=dict)
    body: Any = None
    method: str | None = None  # None: the next request of any method


def simple_user(login: str, uid: int, kind: str = "User") -> dict[str, Any]:
    api = f"https://api.github.com/users/{login}"
    return {
        "login": login,
        "id": uid,
        "node_id": f"U_{uid}",
        "avatar_url": f"https://avatars.example/u/{uid}",
        "gravatar_id": "",
        "url": api,
        "html_url": f"https://github.com/{login}",
        "followers_url": f"{api}/followers",
        "following_url": f"{api}/following{{/other_user}}",
        "gists_url": f"{api}/gists{{/gist_id}}",
        "starred_url": f"{api}/starred{{/owner}}{{/repo}}",
        "subscriptions_url": f"{api}/subscriptions",
        "organizations_url": f"{api}/orgs",
        "repos_url": f"{api}/repos",
        "events_url": f"{api}/events{{/privacy}}",
        "received_events_url": f"{api}/received_events",
        "type": kind,
        "site_admin": False,
    }


class FakeGitHub:
    """Use as a context manager; base_url is what GITHUB_API_URL should be set to."""

    def __init__(
        self,
        token: str,
        *,
        prefix: str = "",
        login: str = "matrix-bot",
        installation: bool = False,
        app_slug: str | None = None,
        app_readable: bool = True,
    ) -> None:
        self.token, self.prefix = token, prefix.rstrip("/")
        # An installation token cannot read /user, and what it writes is by "<slug>[bot]".
        # app_readable False: /app is refused even for an app_slug, as for an app's
        # installation token, so the comments' bot cannot be read from the API.
        self.installation, self.app_slug = installation, app_slug
        self.app_readable = app_readable
        bot = f"{app_slug or 'github-actions'}[bot]"
        self.viewer = simple_user(bot, 41898282, "Bot") if installation else simple_user(login, 7)
        self.requests: list[Recorded] = []
        self.script: list[Scripted] = []
        self.schema_errors: list[str] = []
        self.checked = 0
        spec = load_spec()
        self.openapi = OpenAPI(spec) if spec else None
        self._comments: dict[int, dict[str, Any]] = {}
        self._issue_of: dict[int, tuple[str, int]] = {}
        self._repo_ids: dict[str, int] = {}
        self._next_id = 1000
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        # A short poll keeps shutdown() from waiting the default half second per test.
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}{self.prefix}"

    def __enter__(self) -> FakeGitHub:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def fail(
        self, status: int, headers: dict[str, str] | None = None, body: Any = None, **kw: Any
    ) -> None:
        """Answer the next request (of kw['method'], if given) with this, before routing."""
        self.script.append(Scripted(status, headers or {}, body, kw.get("method")))

    def add_comment(self, repo: str, number: int, body: str, user: dict[str, Any]) -> int:
        with self._lock:
            return self._create(repo, number, body, user)["id"]  # type: ignore[no-any-return]

    def comments(self, repo: str, number: int) -> list[dict[str, Any]]:
        with self._lock:
            return [
                c for i, c in sorted(self._comments.items()) if self._issue_of[i] == (repo, number)
            ]

    def calls(self, method: str | None = None) -> list[Recorded]:
        return [r for r in self.requests if method is None or r.method == method]

    def _create(self, repo: str, number: int, body: str, user: dict[str, Any]) -> dict[str, Any]:
        self._repo_ids.setdefault(repo, 500 + len(self._repo_ids))
        cid, self._next_id = self._next_id, self._next_id + 1
        when = (_T0 + dt.timedelta(minutes=cid)).strftime("%Y-%m-%dT%H:%M:%SZ")
        api = f"https://api.github.com/repos/{repo}/issues"
        self._comments[cid] = {
            "id": cid,
            "node_id": f"IC_{cid}",
            "url": f"{api}/comments/{cid}",
            "html_url": f"https://github.com/{repo}/pull/{number}#issuecomment-{cid}",
            "body": body,
            "user": user,
            "created_at": when,
            "updated_at": when,
            "issue_url": f"{api}/{number}",
            "author_association": "NONE",
            "performed_via_github_app": None,
        }
        self._issue_of[cid] = (repo, number)
        return self._comments[cid]

    def _check(self, what: str, schema: dict[str, Any] | None, instance: Any) -> None:
        if self.openapi is None or schema is None:
            return
        self.checked += 1
        self.schema_errors += [f"{what}: {e}" for e in self.openapi.errors(schema, instance)]

    def handle(self, rec: Recorded, host: str) -> tuple[int, dict[str, str], Any, str | None]:
        """(status, headers, JSON body, OpenAPI path template of the operation or None)."""
        for i, item in enumerate(self.script):
            if item.method in (None, rec.method):
                del self.script[i]
                return item.status, item.headers, item.body, self._template(rec)
        if not rec.path.startswith(self.prefix + "/"):
            return 404, {}, {"message": "Not Found", "documentation_url": DOCS}, None
        path = rec.path[len(self.prefix) :]
        if rec.headers.get("authorization") != f"Bearer {self.token}":
            return 401, {}, {"message": "Bad credentials", "documentation_url": DOCS}, None
        if rec.method == "GET" and path == "/user":
            if self.installation:
                denied = {"message": "Resource not accessible by integration", "status": "403"}
                return 403, {}, {**denied, "documentation_url": DOCS}, None
            return 200, {}, self.viewer, None
        if rec.method == "GET" and path == "/app":
            if self.app_slug is None or not self.app_readable:
                message = "A JSON web token could not be decoded"
                return 401, {}, {"message": message, "documentation_url": DOCS}, None
            return 200, {}, {"id": 9, "slug": self.app_slug, "name": self.app_slug}, None
        if (found := _ISSUE.fullmatch(path)) or (found := _BY_ID.fullmatch(path)):
            repo = f"{found[1]}/{found[2]}" if found.re is _ISSUE else self._repo_name(found[1])
            return self._issue_comments(rec, repo, int(found[3 if found.re is _ISSUE else 2]), host)
        if (found := _COMMENT.fullmatch(path)) and rec.method in ("PATCH", "DELETE"):
            return self._one_comment(rec, int(found[3]))
        return 404, {}, {"message": "Not Found", "documentation_url": DOCS}, None

    def _template(self, rec: Recorded) -> str | None:
        path = rec.path[len(self.prefix) :]
        if _ISSUE.fullmatch(path) or _BY_ID.fullmatch(path):
            return LIST
        return ONE if _COMMENT.fullmatch(path) and rec.method == "PATCH" else None

    def _repo_name(self, rid: str) -> str:
        return next((name for name, i in self._repo_ids.items() if str(i) == rid), "?/?")

    def _issue_comments(
        self, rec: Recorded, repo: str, number: int, host: str
    ) -> tuple[int, dict[str, str], Any, str | None]:
        if rec.method == "POST":
            body = rec.body.get("body") if isinstance(rec.body, dict) else None
            if not isinstance(body, str) or len(body) > 65536:
                return self._invalid("Body is too long (maximum is 65536 characters)", LIST)
            return 201, {}, self._create(repo, number, body, self.viewer), LIST
        if rec.method != "GET":
            return 404, {}, {"message": "Not Found", "documentation_url": DOCS}, None
        per_page = min(100, max(1, int(rec.query.get("per_page", ["30"])[0])))
        page = max(1, int(rec.query.get("page", ["1"])[0]))
        items = [
            c for i, c in sorted(self._comments.items()) if self._issue_of[i] == (repo, number)
        ]
        last = max(1, -(-len(items) // per_page))
        self._repo_ids.setdefault(repo, 500 + len(self._repo_ids))
        url = f"http://{host}{self.prefix}/repositories/{self._repo_ids[repo]}/issues/{number}/comments"
        rels = {"prev": page - 1, "next": page + 1, "last": last, "first": 1}
        links = [
            f'<{url}?per_page={per_page}&page={n}>; rel="{rel}"'
            for rel, n in rels.items()
            if 1 <= n <= last and (rel in ("prev", "next") or page != n)
        ]
        headers = {"Link": ", ".join(links)} if links else {}
        return 200, headers, items[(page - 1) * per_page : page * per_page], LIST

    def _one_comment(self, rec: Recorded, cid: int) -> tuple[int, dict[str, str], Any, str | None]:
        if cid not in self._comments:
            return 404, {}, {"message": "Not Found", "documentation_url": DOCS}, None
        if rec.method == "DELETE":
            del self._comments[cid]
            return 204, {}, None, None
        body = rec.body.get("body") if isinstance(rec.body, dict) else None
        if not isinstance(body, str) or len(body) > 65536:
            return self._invalid("Body is too long (maximum is 65536 characters)", ONE)
        comment = self._comments[cid]
        comment["body"] = body
        comment["updated_at"] = (_T0 + dt.timedelta(days=1, minutes=len(self.requests))).strftime(
            "%Y-%m-%dT%H:%M:%SZ"
        )
        return 200, {}, comment, ONE

    @staticmethod
    def _invalid(message: str, template: str) -> tuple[int, dict[str, str], Any, str | None]:
        error = {"resource": "IssueComment", "code": "custom", "field": "body", "message": message}
        body = {"message": "Validation Failed", "errors": [error], "documentation_url": DOCS}
        return 422, {}, body, template


def _handler(fake: FakeGitHub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass  # keep pytest output clean

        def _serve(self) -> None:
            url = urlsplit(self.path)
            size = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(size) if size else b""
            body = json.loads(raw) if raw else None
            headers = {k.lower(): v for k, v in self.headers.items()}
            rec = Recorded(self.command, url.path, parse_qs(url.query), headers, body)
            with fake._lock:
                fake.requests.append(rec)
                status, extra, payload, template = fake.handle(rec, self.headers["Host"])
                rec.status = status
                if template and fake.openapi:
                    if rec.method in ("POST", "PATCH"):
                        schema = fake.openapi.request_schema(template, rec.method)
                        fake._check(f"{rec.method} request", schema, body)
                    schema = fake.openapi.response_schema(template, rec.method, status)
                    fake._check(f"{rec.method} {status} response", schema, payload)
                if fake.openapi and rec.path.endswith("/user") and status == 200:
                    schema = {"$ref": "#/components/schemas/simple-user"}
                    fake._check("GET /user response", schema, payload)
            data = b"" if payload is None else json.dumps(payload).encode()
            self.send_response(status)
            for key, value in extra.items():
                self.send_header(key, value)
            if data:
                self.send_header("Content-Type", "application/json; charset=utf-8")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_PATCH = do_DELETE = _serve

    return Handler
