"""A package index on loopback for the tests: PEP 503's simple API over a folder of wheels (and
sdists), behind HTTP basic auth when given a user and token, with a log of every request (path,
and whether it carried the credential). Only 127.0.0.1 is listened on."""

from __future__ import annotations

import base64
import html
import re
import shutil
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from urllib.parse import quote, unquote


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def project_of(wheel: str) -> str:
    return normalize(wheel.split("-", 1)[0])


@dataclass(frozen=True)
class Request:
    path: str
    authorized: bool


class Index:
    """with Index(folder, user="u", token="t") as index: pip install --index-url index.url(...)"""

    def __init__(self, folder: Path, user: str | None = None, token: str | None = None) -> None:
        self.folder = folder
        served = [*folder.glob("*.whl"), *folder.glob("*.tar.gz")]  # wheels, and sdists
        self.wheels = {w.name: w for w in served}
        self.expected = (
            "Basic " + base64.b64encode(f"{user}:{token}".encode()).decode() if user else None
        )
        self.requests: list[Request] = []
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def url(self, userinfo: str | None = None) -> str:
        at = f"{userinfo}@" if userinfo else ""
        return f"http://{at}127.0.0.1:{self.port}/simple"

    def __enter__(self) -> Index:
        self._thread.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._server.shutdown()
        self._server.server_close()

    def served(self, project: str) -> list[Request]:
        return [r for r in self.requests if r.path.rstrip("/") == f"/simple/{normalize(project)}"]

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        index = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: object) -> None:  # quiet
                pass

            def do_GET(self) -> None:
                authorized = index.expected is None or (
                    self.headers.get("Authorization") == index.expected
                )
                index.requests.append(Request(self.path, authorized))
                if not authorized:
                    self.send_response(401)
                    self.send_header("WWW-Authenticate", 'Basic realm="test index"')
                    self.end_headers()
                    return
                parts = [unquote(p) for p in self.path.split("?", 1)[0].split("/") if p]
                if parts[:1] == ["simple"] and len(parts) == 2:
                    self._page(normalize(parts[1]))
                elif parts[:1] == ["files"] and len(parts) == 2 and parts[1] in index.wheels:
                    self._file(index.wheels[parts[1]])
                else:
                    self.send_error(404)

            def _page(self, project: str) -> None:
                links = [
                    f'<a href="/files/{quote(n)}">{html.escape(n)}</a><br>'
                    for n in sorted(index.wheels)
                    if project_of(n) == project
                ]
                if not links:
                    self.send_error(404)
                    return
                body = ("<!DOCTYPE html><html><body>" + "".join(links) + "</body></html>").encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _file(self, path: Path) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "application/octet-stream")
                self.send_header("Content-Length", str(path.stat().st_size))
                self.end_headers()
                with open(path, "rb") as fh:
                    shutil.copyfileobj(fh, self.wfile)

        return Handler
