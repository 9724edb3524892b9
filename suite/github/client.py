"""GitHub REST client: base URL and token from the environment, retries, pagination, errors.

The token is read from an environment variable and kept inside a requests auth object
that never prints it; error messages carry GitHub's status and message, not the request.
"""

from __future__ import annotations

import email.utils
import os
import random
import re
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any
from urllib.parse import urlsplit

import requests
import requests.auth

from suite import __version__
from suite.core.errors import InputError, SuiteError
from suite.core.secrets import redact_text
from suite.report.escape import plain

DEFAULT_API_URL = "https://api.github.com"
API_VERSION = "2022-11-28"
USER_AGENT = f"torch-matrix/{__version__}"
PER_PAGE = 100
# A header value with whitespace or controls makes requests raise an error that quotes the
# value, which would print the token; reject such a token before it reaches requests.
_TOKEN_CHARS = re.compile(r"[\x21-\x7e]+")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class GitHubError(SuiteError):
    """A GitHub API call failed; status is None when no HTTP response came back."""

    def __init__(
        self,
        status: int | None,
        message: str,
        *,
        method: str,
        path: str,
        rate_limited: bool = False,
    ) -> None:
        self.status = status
        self.message = message
        self.method = method
        self.path = path
        self.rate_limited = rate_limited
        code = f"HTTP {status}" if status is not None else "no response"
        super().__init__(f"GitHub API {method} {path} failed ({code}): {message}")


class _BearerAuth(requests.auth.AuthBase):
    """Bearer auth passed per request: it also keeps requests from applying ~/.netrc."""

    def __init__(self, token: str) -> None:
        self._token = token

    def __call__(self, request: requests.PreparedRequest) -> requests.PreparedRequest:
        request.headers["Authorization"] = f"Bearer {self._token}"
        return request

    def __repr__(self) -> str:
        return "<bearer token hidden>"


def _message(resp: requests.Response) -> str:
    """GitHub's own message, with the per-field messages a 422 carries."""
    try:
        doc = resp.json()
    except ValueError:
        doc = None
    if not isinstance(doc, dict):
        return plain(resp.text or resp.reason or "no message", 300)
    text = str(doc.get("message") or resp.reason or "no message")
    details = []
    for item in doc.get("errors") or []:
        if isinstance(item, dict):
            details.append(str(item.get("message") or item.get("code") or item))
        else:
            details.append(str(item))
    if details:
        text += " (" + "; ".join(details) + ")"
    return plain(text, 1000)


def _unreachable(exc: requests.RequestException, url: str) -> str:
    # The class name only: requests' own text can be long and repeats the whole URL.
    return f"no answer from {urlsplit(redact_text(url)).netloc} ({type(exc).__name__})"


def _secondary_limit(resp: requests.Response) -> bool:
    try:
        doc = resp.json()
    except ValueError:
        return False
    message = doc.get("message") if isinstance(doc, dict) else None
    return isinstance(message, str) and "secondary rate limit" in message.lower()


class GitHubClient:
    """A small REST client. sleep, clock and rand are injectable so tests never wait."""

    def __init__(
        self,
        *,
        token_env: str = "GITHUB_TOKEN",
        base_url: str | None = None,
        environ: Mapping[str, str] | None = None,
        session: requests.Session | None = None,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.time,
        rand: Callable[[], float] = random.random,
        max_attempts: int = 5,
        max_sleep: float = 60.0,
        backoff: float = 1.0,
        timeout: float = 30.0,
    ) -> None:
        env = os.environ if environ is None else environ
        if not _ENV_NAME.fullmatch(token_env):
            raise InputError(
                f"--token-env must name an environment variable, got {token_env!r}",
                option="--token-env",
            )
        token = env.get(token_env, "").strip()
        if not token:
            raise InputError(
                f"no GitHub token: environment variable {token_env} is not set or is empty",
                path=token_env,
            )
        if not _TOKEN_CHARS.fullmatch(token):
            raise InputError(
                f"the token in {token_env} contains spaces, controls or non-ASCII characters",
                path=token_env,
            )
        url = (base_url or env.get("GITHUB_API_URL") or DEFAULT_API_URL).strip().rstrip("/")
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc or parts.query:
            raise InputError(
                f"GITHUB_API_URL must be an http(s) URL such as {DEFAULT_API_URL} or "
                f"https://ghe.example/api/v3, got {redact_text(url)!r}",
                path="GITHUB_API_URL",
            )
        self.base_url = url
        self._origin = (parts.scheme, parts.netloc.lower())
        self._auth = _BearerAuth(token)
        # Kept only to scrub it from text a server might echo back.
        self._secret = token
        self._session = session or requests.Session()
        self._sleep, self._clock, self._rand = sleep, clock, rand
        self.max_attempts = max(1, max_attempts)
        self.max_sleep = max_sleep
        self.backoff = backoff
        self.timeout = timeout

    def __repr__(self) -> str:
        return f"GitHubClient(base_url={redact_text(self.base_url)!r})"

    def url(self, path: str) -> str:
        """Join a path to the base URL, keeping a GHES prefix such as /api/v3."""
        return f"{self.base_url}/{path.lstrip('/')}"

    def _error(
        self, status: int | None, message: str, method: str, url: str, **kw: bool
    ) -> GitHubError:
        # The path is shown relative to the server so a long base URL does not drown it.
        path = urlsplit(url).path or "/"
        return GitHubError(
            status, message.replace(self._secret, "***"), method=method, path=path, **kw
        )

    def _delay(self, resp: requests.Response, failures: int) -> float | None:
        """Seconds to wait before retrying resp, or None when it must not be retried."""
        status = resp.status_code
        headers = resp.headers
        exhausted = headers.get("x-ratelimit-remaining") == "0"
        secondary = status == 403 and _secondary_limit(resp)
        if not (status >= 500 or status == 429 or (status == 403 and (exhausted or secondary))):
            return None
        retry_after = headers.get("retry-after")
        if retry_after:
            try:
                return max(0.0, float(retry_after))
            except ValueError:
                pass
            try:  # the HTTP-date form, which GitHub does not send today
                when = email.utils.parsedate_to_datetime(retry_after)
                return max(0.0, when.timestamp() - self._clock())
            except (TypeError, ValueError):
                pass
        reset = headers.get("x-ratelimit-reset")
        if exhausted and reset and reset.isdigit():
            # One second of slack: the reset second itself may still be counted as limited.
            return max(0.0, int(reset) - self._clock()) + 1.0
        # GitHub asks for at least a minute before retrying a secondary limit without a hint.
        floor = 60.0 if secondary else 0.0
        return min(self.max_sleep, max(floor, self._backoff(failures)))

    def _backoff(self, failures: int) -> float:
        # Jitter spreads out clients that failed together, so they do not retry together.
        return self.backoff * 2.0 ** (failures - 1) * (0.5 + self._rand() / 2)

    def request(
        self,
        method: str,
        path_or_url: str,
        *,
        params: Mapping[str, str | int] | None = None,
        json: Any = None,
    ) -> requests.Response:
        """One call with retries; raise GitHubError for any final status of 400 or more."""
        url = path_or_url if "://" in path_or_url else self.url(path_or_url)
        headers = {
            "Accept": "application/vnd.github+json",
            "X-GitHub-Api-Version": API_VERSION,
            "User-Agent": USER_AGENT,
        }
        failures = 0
        while True:
            try:
                resp = self._session.request(
                    method,
                    url,
                    params=params,
                    json=json,
                    headers=headers,
                    auth=self._auth,
                    timeout=self.timeout,
                )
            except requests.ConnectionError as exc:
                # Nothing (or nothing complete) reached GitHub: worth another try. A read
                # timeout is not retried, since a POST may already have made a comment.
                failures += 1
                if failures >= self.max_attempts:
                    raise self._error(None, _unreachable(exc, url), method, url) from None
                self._sleep(min(self.max_sleep, self._backoff(failures)))
                continue
            except requests.RequestException as exc:
                raise self._error(None, _unreachable(exc, url), method, url) from None
            if resp.status_code < 400:
                return resp
            failures += 1
            delay = self._delay(resp, failures)
            limited = resp.status_code in (403, 429) and delay is not None
            if delay is None or failures >= self.max_attempts:
                raise self._error(
                    resp.status_code, _message(resp), method, url, rate_limited=limited
                )
            if delay > self.max_sleep:
                # Retrying before the time GitHub named only earns another refusal.
                raise self._error(
                    resp.status_code,
                    f"{_message(resp)} (retry allowed in {delay:.0f} s, more than the "
                    f"{self.max_sleep:.0f} s this client waits)",
                    method,
                    url,
                    rate_limited=limited,
                )
            self._sleep(delay)

    def _json(self, resp: requests.Response, method: str) -> Any:
        try:
            return resp.json()
        except ValueError:
            raise self._error(resp.status_code, "response is not JSON", method, resp.url) from None

    def get(self, path: str, params: Mapping[str, str | int] | None = None) -> Any:
        return self._json(self.request("GET", path, params=params), "GET")

    def post(self, path: str, body: Any) -> Any:
        return self._json(self.request("POST", path, json=body), "POST")

    def patch(self, path: str, body: Any) -> Any:
        return self._json(self.request("PATCH", path, json=body), "PATCH")

    def delete(self, path: str) -> None:
        self.request("DELETE", path)

    def paginate(self, path: str, params: Mapping[str, str | int] | None = None) -> Iterator[Any]:
        """Items of a list endpoint, PER_PAGE at a time, following Link rel="next"."""
        resp = self.request("GET", path, params={**(params or {}), "per_page": PER_PAGE})
        while True:
            page = self._json(resp, "GET")
            if not isinstance(page, list):
                raise self._error(resp.status_code, "expected a JSON list", "GET", resp.url)
            yield from page
            following = resp.links.get("next", {}).get("url")
            if not following:
                return
            parts = urlsplit(following)
            if (parts.scheme, parts.netloc.lower()) != self._origin:
                # The token goes with every request: never to a host other than the API's.
                raise self._error(
                    resp.status_code, "Link rel=next points to another host", "GET", resp.url
                )
            # The next link already carries per_page and page; adding params would repeat them.
            resp = self.request("GET", following)
