"""The index credential goes only to approved hosts, and never into a process that runs user code.

A pull request writes its own pin files: `pins` hands the bench job an index URL with the team's
${INDEX_TOKEN} only where the base branch names its host (or --index-hosts does), and the
expansion itself (TORCH_MATRIX_INDEX_HOSTS) holds to the same hosts: an index on another host is
not used at all, and one pip process holds one host's credential, as a real pip against two
loopback indexes shows. The credentials come from a file, and no worker or plugin-import child
inherits a credential, the runner's own tokens included.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from suite.cli.ci import pins_command
from suite.core.errors import InputError
from suite.core.index_access import (
    ENV_FILE_VAR,
    ENV_LINES_VAR,
    HOSTS_VAR,
    index_host,
    parse_hosts,
    read_env_file,
)
from suite.core.secrets import RUNNER_CREDENTIALS
from suite.execute.environment import RunOptions, worker_env
from suite.execute.indexes import Indexes
from suite.execute.plugins import check_plugins

SECRET = "Idx-S3cret-value-0451"
USER = "ci-reader"
REFS = "${INDEX_USER}:${INDEX_TOKEN}"
TRUSTED = f"https://{REFS}@pkgs.example.com/simple"
ATTACKER = f"https://{REFS}@attacker.example/simple"
BARE = "https://attacker.example/simple"  # ATTACKER with no credential
needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")


def _git(repo: Path, *args: str) -> None:
    env = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
    subprocess.run(
        ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.invalid", *args],
        check=True, capture_output=True, env=env, timeout=60,
    )  # fmt: skip


@pytest.fixture()
def repo(tmp_path: Path) -> Path:
    """Base: torch 2.13.0 from the team's index. Head: torch bumped, and an index of its own
    that names the team's credential."""
    root = tmp_path / "repo"
    root.mkdir()
    _git(root, "init", "-q")
    (root / "requirements.txt").write_text(f"--extra-index-url {TRUSTED}\ntorch==2.13.0\n")
    _git(root, "add", "-A")
    _git(root, "commit", "-q", "-m", "base")
    (root / "requirements.txt").write_text(
        f"--extra-index-url {TRUSTED}\n--extra-index-url {ATTACKER}\ntorch==2.14.1\n"
    )
    _git(root, "commit", "-q", "-am", "bump torch")
    return root


def _pins(repo: Path, *extra: str) -> tuple[dict[str, Any], str]:
    argv = ["--base", "HEAD~1", "--head", "HEAD", "--repo", str(repo), "--json", *extra]
    result = CliRunner().invoke(pins_command, argv, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    record: dict[str, Any] = json.loads(result.stdout)
    return record, result.stderr


@needs_git
def test_pins_keep_the_credential_only_for_a_host_the_base_branch_names(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    outputs = tmp_path / "github-output"
    monkeypatch.setenv("GITHUB_OUTPUT", str(outputs))
    record, stderr = _pins(repo)
    assert record["baseline_extra_index_urls"] == [TRUSTED]
    assert record["candidate_extra_index_urls"] == [TRUSTED, BARE]
    assert record["index_hosts"] == ["pkgs.example.com"]
    [note] = record["index_notes"]
    assert note == (
        "the head's requirements.txt names index host attacker.example, which the base branch "
        "does not (nor index-hosts): not used, so the candidate side is not installed and its "
        "cells are untested; approve the host in the base branch's pin files or the workflow's "
        "index-hosts"
    )
    assert f"warning: {note}" in stderr
    written = outputs.read_text()
    assert "index_hosts=pkgs.example.com\n" in written
    assert f"\nindex_notes={note}\n" in written  # a line each (one here)
    assert f"candidate_extra_index_urls={TRUSTED} https://attacker.example/simple\n" in written
    # The workflow may approve a host the base branch does not name yet.
    record, _ = _pins(repo, "--index-hosts", "attacker.example, mirror.example.com:8443")
    assert record["candidate_extra_index_urls"] == [TRUSTED, ATTACKER]
    assert record["index_hosts"] == [
        "attacker.example",
        "mirror.example.com:8443",
        "pkgs.example.com",
    ]
    assert record["index_notes"] == []


SAME_HOST = f"HTTPS://{REFS}@PKGS.example.com:443/simple"  # case and default port aside
REFUSED = "not used, so the candidate side is not installed"
FORMS = {
    "host-is-a-variable": (
        f"https://{REFS}@${{INDEX_HOST}}/simple",
        "https://${INDEX_HOST}/simple",
        "cannot be checked",
    ),
    "variable-in-path": (
        "https://attacker.example/${INDEX_TOKEN}/simple",
        "https://attacker.example/${INDEX_TOKEN}/simple",
        "host attacker.example,",
    ),
    "two-ats": (f"https://{REFS}@pkgs.example.com@attacker.example/simple", BARE, "attacker"),
    "other-port": (
        f"https://{REFS}@pkgs.example.com:8443/simple",
        "https://pkgs.example.com:8443/simple",
        "host pkgs.example.com:8443",
    ),
    "literal": ("https://reader:literal-Token-1@attacker.example/simple", BARE, "attacker"),
    "public": (
        "https://mirror.example.com/simple",
        "https://mirror.example.com/simple",
        "host mirror.example.com",
    ),
    "same-host": (SAME_HOST, SAME_HOST, None),
}


@pytest.mark.parametrize(("head_url", "kept", "said"), FORMS.values(), ids=FORMS.keys())
def test_each_unapproved_form_is_handed_on_bare_and_said_to_be_refused(
    tmp_path: Path, head_url: str, kept: str, said: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """pins hands the URL on without userinfo and says the side is not installed; the bench
    job's expansion, holding the same approved hosts, refuses the side."""
    old, new = tmp_path / "old.txt", tmp_path / "requirements.txt"
    old.write_text(f"--index-url {TRUSTED}\ntorch==2.13.0\n")
    new.write_text(f"--index-url {TRUSTED}\n--extra-index-url {head_url}\ntorch==2.14.1\n")
    argv = ["--base-file", str(old), "--head-file", str(new), "--json"]
    result = CliRunner().invoke(pins_command, argv, catch_exceptions=False)
    record = json.loads(result.stdout)
    assert record["candidate_index_url"] == TRUSTED
    assert record["candidate_extra_index_urls"] == [kept]
    notes = record["index_notes"]
    assert (said in notes[0] and REFUSED in notes[0] and len(notes) == 1) if said else notes == []
    assert "literal-Token-1" not in result.stdout + result.stderr
    monkeypatch.setenv("INDEX_USER", USER)
    monkeypatch.setenv("INDEX_TOKEN", SECRET)
    monkeypatch.setenv(HOSTS_VAR, " ".join(record["index_hosts"]))
    handed = Indexes(record["candidate_index_url"], tuple(record["candidate_extra_index_urls"]))
    if said is None:
        assert SECRET in handed.pip_env()["PIP_INDEX_URL"]
        return
    with pytest.raises(InputError, match="not installed at all") as info:
        handed.pip_env()
    assert SECRET not in str(info.value)


def test_index_hosts_must_be_hosts(tmp_path: Path) -> None:
    one = tmp_path / "requirements.txt"
    one.write_text("torch==2.13.0\n")
    argv = ["--base-file", str(one), "--head-file", str(one), "--index-hosts", "https://x/simple"]
    result = CliRunner().invoke(pins_command, argv, catch_exceptions=False)
    assert result.exit_code == 2 and "--index-hosts" in result.stderr
    assert parse_hosts(" A.example.com,b.example.com:8443 ", option="x") == {
        "a.example.com",
        "b.example.com:8443",
    }
    assert index_host("https://u:p@[::1]:8080/simple") == "[::1]:8080"
    assert index_host("http://Host.example:80/simple") == "host.example"
    assert index_host("${INDEX_URL}") is None
    assert index_host("https://pkgs.example.com%2fattacker.example/simple") is None


# --- expansion bound to the approved hosts ----------------------------------------------------


@pytest.fixture()
def secret_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INDEX_USER", USER)
    monkeypatch.setenv("INDEX_TOKEN", SECRET)
    monkeypatch.setenv(HOSTS_VAR, "pkgs.example.com")
    monkeypatch.delenv(ENV_FILE_VAR, raising=False)


@pytest.mark.usefixtures("secret_env")
def test_only_an_approved_host_is_used_and_gets_the_secret() -> None:
    with pytest.raises(InputError, match=r"host attacker\.example is not among") as info:
        Indexes(TRUSTED, (ATTACKER,)).pip_env()  # not even without its credential
    assert "not installed at all" in str(info.value) and SECRET not in str(info.value)
    with pytest.raises(InputError, match="not among"):
        Indexes(TRUSTED, (BARE,)).pip_env()  # a public index the base branch did not approve
    alone = Indexes(TRUSTED)
    assert alone.pip_env() == {"PIP_INDEX_URL": f"https://{USER}:{SECRET}@pkgs.example.com/simple"}
    assert alone.public() == {
        "index_url": "https://pkgs.example.com/simple",
        "extra_index_urls": [],
    }
    # An argument names the hosts instead of the variable.
    given = Indexes(None, (ATTACKER,)).pip_env(hosts=["attacker.example"])
    assert given["PIP_EXTRA_INDEX_URL"] == f"https://{USER}:{SECRET}@attacker.example/simple"


@pytest.mark.usefixtures("secret_env")
def test_one_pip_process_holds_one_hosts_credential(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(HOSTS_VAR, "pkgs.example.com mirror.example.com")
    mirror = f"https://{REFS}@mirror.example.com/simple"
    with pytest.raises(InputError, match="credentials for 2 hosts") as info:
        Indexes(TRUSTED, (mirror,)).pip_env()
    assert "mirror.example.com, pkgs.example.com" in str(info.value)
    assert SECRET not in str(info.value)
    # Two URLs on the one host, or a second approved host with no credential, are one.
    same = Indexes(TRUSTED, (f"https://{REFS}@pkgs.example.com/extra",)).pip_env()
    assert same["PIP_EXTRA_INDEX_URL"].endswith("@pkgs.example.com/extra")
    plain = Indexes(TRUSTED, ("https://mirror.example.com/simple",)).pip_env()
    assert plain["PIP_EXTRA_INDEX_URL"] == "https://mirror.example.com/simple"


@pytest.mark.usefixtures("secret_env")
@pytest.mark.parametrize(
    ("url", "said"),
    [
        ("https://attacker.example/${INDEX_TOKEN}/simple", "host attacker.example is not among"),
        (f"https://{REFS}@${{INDEX_HOST}}/simple", "cannot be checked"),
        ("${INDEX_URL}", "cannot be checked"),
    ],
    ids=["variable-in-path", "host-is-a-variable", "whole-url-is-a-variable"],
)
def test_a_reference_left_on_an_unapproved_host_is_an_error(
    url: str, said: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("INDEX_HOST", "pkgs.example.com")
    monkeypatch.setenv("INDEX_URL", TRUSTED)
    with pytest.raises(InputError, match=said) as info:
        Indexes(None, (url,)).expanded(option="--candidate-extra-index-url")
    assert str(info.value).startswith("--candidate-extra-index-url")
    assert HOSTS_VAR in str(info.value) and SECRET not in str(info.value)


def test_no_approved_hosts_is_none_and_an_unset_variable_is_every_host(
    secret_env: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(HOSTS_VAR, "")
    with pytest.raises(InputError, match="not among the approved index hosts"):
        Indexes(TRUSTED).pip_env()
    monkeypatch.delenv(HOSTS_VAR)  # a person's own `ab`: as before
    assert SECRET in Indexes(None, (ATTACKER,)).pip_env()["PIP_EXTRA_INDEX_URL"]


def test_the_credentials_come_from_a_file(
    secret_env: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("INDEX_TOKEN")
    monkeypatch.setenv("INDEX_USER", "someone-else")
    env_file = tmp_path / "index.env"
    env_file.write_text(f"# the team's index\nINDEX_USER={USER}\r\nINDEX_TOKEN={SECRET}=x\n\n")
    monkeypatch.setenv(ENV_FILE_VAR, str(env_file))
    expected = f"https://{USER}:{SECRET}=x@pkgs.example.com/simple"  # the file wins
    assert Indexes(TRUSTED).pip_env() == {"PIP_INDEX_URL": expected}
    env_file.write_text(f"INDEX_USER={USER}\n{SECRET}\n")
    with pytest.raises(InputError, match="line 2 is not NAME=VALUE") as info:
        read_env_file(env_file)
    assert str(env_file) in str(info.value) and SECRET not in str(info.value)
    env_file.write_text(f"1BAD={SECRET}\n")
    with pytest.raises(InputError, match="line 1") as info:
        Indexes(TRUSTED).pip_env()
    assert SECRET not in str(info.value)
    monkeypatch.setenv(ENV_FILE_VAR, str(tmp_path / "missing.env"))
    with pytest.raises(InputError, match="cannot read it"):
        Indexes(TRUSTED).expanded()
    public = "https://pkgs.example.com/simple"  # names no variable: the file is not read
    assert Indexes(public).pip_env() == {"PIP_INDEX_URL": public}


# --- a real pip against two loopback indexes ------------------------------------------------


@dataclass
class _Logged:
    """A loopback index that answers 401 and logs each request line and Authorization header."""

    seen: list[tuple[str, str | None]] = field(default_factory=list)
    port: int = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/simple"


@pytest.fixture()
def logged() -> Iterator[tuple[_Logged, _Logged]]:
    servers, threads, pair = [], [], (_Logged(), _Logged())
    for record in pair:

        class Handler(BaseHTTPRequestHandler):
            log = record

            def log_message(self, format: str, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                self.log.seen.append((self.requestline, self.headers.get("Authorization")))
                self.send_response(401)
                self.send_header("WWW-Authenticate", 'Basic realm="test index"')
                self.send_header("Content-Length", "0")
                self.end_headers()

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        record.port = server.server_address[1]
        servers.append(server)
        threads.append(threading.Thread(target=server.serve_forever, daemon=True))
        threads[-1].start()
    yield pair
    for server in servers:
        server.shutdown()
        server.server_close()


def test_pip_sends_the_credential_to_its_host_alone(
    logged: tuple[_Logged, _Logged], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real pip, two loopback indexes: the second, unapproved, is refused before pip starts
    (it hears nothing); approved without a credential, it is asked with none beside the first."""
    first, second = logged
    monkeypatch.setenv("INDEX_USER", USER)
    monkeypatch.setenv("INDEX_TOKEN", SECRET)
    monkeypatch.setenv(HOSTS_VAR, f"127.0.0.1:{first.port}")
    written = first.url.replace("http://", f"http://{REFS}@")
    with pytest.raises(InputError, match=rf"host 127\.0\.0\.1:{second.port} is not among"):
        Indexes(written, (second.url,)).pip_env()
    monkeypatch.setenv(HOSTS_VAR, f"127.0.0.1:{first.port} 127.0.0.1:{second.port}")
    pip_env = Indexes(written, (second.url,)).pip_env()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_") and "PROXY" not in k}
    env |= {"PIP_CONFIG_FILE": os.devnull, "NETRC": os.devnull, "NO_PROXY": "*", **pip_env}
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "download", "--no-deps", "--no-cache-dir", "--no-input",
         "--disable-pip-version-check", "--keyring-provider", "disabled", "--retries", "0",
         "--timeout", "5", "-d", str(tmp_path), "torch-matrix-no-such-package"],
        env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode != 0  # no index has it
    assert second.seen, proc.stderr  # pip asked the second index ...
    assert all(auth is None for _, auth in second.seen), second.seen  # ... with no credential
    token = base64.b64encode(f"{USER}:{SECRET}".encode()).decode()
    assert (first.seen[0][1] or "").endswith(token), first.seen  # the first one has it
    assert not any(SECRET in line for line, _ in first.seen + second.seen)


# --- no credential where user code runs --------------------------------------------------------

RUNNER_VARS = {name: f"runner-{name.lower()}-value" for name in RUNNER_CREDENTIALS}
KEPT = {"TORCH_MATRIX_TEAM_BENCH_FAIL_ON": "2.14", "TORCH_LOGS": "+dynamo"}


@pytest.fixture()
def credential_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    env_file = tmp_path / "index.env"
    env_file.write_text(f"INDEX_USER={USER}\nINDEX_TOKEN={SECRET}\nINDEX_PLAIN=plain-value\n")
    env_file.chmod(0o600)
    for name, value in {
        **RUNNER_VARS,
        **KEPT,
        "INDEX_TOKEN": SECRET,
        "INDEX_USER": USER,  # not secret by name: withheld because the file sets it
        "INDEX_PLAIN": "plain-value",
        "TORCH_INDEX_URL": f"https://{USER}:{SECRET}@pkgs.example.com/simple",  # by value
        ENV_LINES_VAR: f"INDEX_USER={USER}\nINDEX_TOKEN={SECRET}\n",
        ENV_FILE_VAR: str(env_file),
    }.items():
        monkeypatch.setenv(name, value)
    return env_file


def _assert_clean(env: dict[str, str]) -> None:
    assert not set(RUNNER_CREDENTIALS) & set(env)
    gone = {"INDEX_TOKEN", "INDEX_USER", "INDEX_PLAIN", "TORCH_INDEX_URL", ENV_LINES_VAR}
    assert not (gone | {ENV_FILE_VAR}) & set(env)
    assert not any(SECRET in v or USER in v for v in env.values())
    assert {k: env[k] for k in KEPT} == KEPT


@pytest.mark.usefixtures("credential_env")
def test_a_worker_inherits_no_credential(tmp_path: Path) -> None:
    env = worker_env(RunOptions(out=tmp_path, extra_env={"TORCH_MATRIX_COUNT": "0"}))
    _assert_clean(env)
    assert env["TORCH_MATRIX_COUNT"] == "0" and env["PYTHONUNBUFFERED"] == "1"


@pytest.mark.usefixtures("credential_env")
def test_a_plugin_import_child_inherits_no_credential(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dump = tmp_path / "env.json"
    monkeypatch.setenv("TORCH_MATRIX_TEST_ENV_DUMP", str(dump))
    plugin = tmp_path / "env_dump.py"
    plugin.write_text(
        "import json, os\n"
        "from suite.workloads import CellContext, Workload\n"
        "with open(os.environ['TORCH_MATRIX_TEST_ENV_DUMP'], 'w') as fh:\n"
        "    json.dump(dict(os.environ), fh)\n"
        "class Dump(Workload):\n"
        "    name = 'env_dump'\n"
        "    def run(self, ctx: CellContext) -> None:\n"
        "        pass\n"
    )
    check_plugins([f"{plugin}:Dump"], timeout_s=60)
    _assert_clean(json.loads(dump.read_text()))
