"""Which package-index hosts may receive a credential, and where the credentials come from.

An index URL may name variables (https://${INDEX_USER}:${INDEX_TOKEN}@host/simple). In CI a pull
request chooses the URLs, so a credential goes only to an approved host: one the base branch's
pin files name, or one the workflow names (`pins --index-hosts`, then TORCH_MATRIX_INDEX_HOSTS
where torch installs). The host is read from the URL as written, before any substitution, so no
value can move it; a URL whose host part is itself a ${NAME} (or anything but a plain name or
address) cannot be checked.

The values come from the environment overlaid with the file TORCH_MATRIX_INDEX_ENV_FILE names
(lines NAME=VALUE): kept there, a secret enters no environment, and so no worker and no process
that imports workload code inherits it. The names that file sets are withheld from those
processes all the same (index_secret_names), should the variables be exported too. The file may
be an open descriptor (/dev/fd/3: the bench action hands the lines on a pipe and leaves no file):
every command then reads it first, keeps the lines in its own memory and closes it
(hold_index_env), so that no process it starts later finds them behind the descriptor.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Collection, Mapping
from pathlib import Path

from suite.core.errors import InputError

HOSTS_VAR = "TORCH_MATRIX_INDEX_HOSTS"
ENV_FILE_VAR = "TORCH_MATRIX_INDEX_ENV_FILE"
# The lines NAME=VALUE themselves, as a workflow hands them from its secret.
ENV_LINES_VAR = "TORCH_MATRIX_INDEX_ENV"
REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# scheme://authority, the authority ending where pip's URL parser ends it.
_AUTHORITY = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*://)([^/?#]*)")
# A host name or an IP address (IPv6 in brackets), and a port: nothing that a parser could read
# as another host (no %-escape, no backslash, no ${NAME}).
_HOST = re.compile(
    r"(?:[a-z0-9_](?:[a-z0-9_.-]*[a-z0-9_])?|\[[0-9a-f:.]+\])(?::[0-9]{1,5})?", re.IGNORECASE
)
_DEFAULT_PORTS = {"http://": ":80", "https://": ":443"}
ENV_FILE_MAX_BYTES = 1 << 20
_FD_PATH = re.compile(r"/(?:dev|proc/self)/fd/([0-9]+)")
_HELD: dict[str, dict[str, str]] = {}  # a descriptor's variables, read once (a pipe reads once)


def host_part(url: str) -> str | None:
    """The host[:port] of a URL as written, userinfo left out; None for what is no scheme://."""
    match = _AUTHORITY.match(url.strip())
    return match[2].rpartition("@")[2] if match else None


def index_host(url: str) -> str | None:
    """The host an index URL names, as approved hosts are written: `host` or `host:port`,
    lowercase, the scheme's default port dropped. None when it cannot be told: no scheme://, or
    a host part that is no plain name or address (a ${NAME} in it, a %-escape)."""
    match = _AUTHORITY.match(url.strip())
    host = host_part(url)
    if match is None or host is None or not _HOST.fullmatch(host):
        return None
    host = host.lower()
    default = _DEFAULT_PORTS.get(match[1].lower())
    return host.removesuffix(default) if default else host


def without_userinfo(url: str) -> str:
    """The URL with no user:password@ before its host, however many @ the authority holds."""
    match = _AUTHORITY.match(url.strip())
    if match is None:
        return url
    return f"{match[1]}{match[2].rpartition('@')[2]}{url.strip()[match.end() :]}"


def parse_hosts(text: str, *, option: str) -> frozenset[str]:
    """Hosts separated by commas or spaces (pkgs.example.com, mirror.example.com:8443)."""
    hosts = set()
    for word in re.split(r"[\s,]+", text.strip()):
        if not word:
            continue
        if not _HOST.fullmatch(word):
            raise InputError(
                f"{word!r} is not a host name: give hosts such as pkgs.example.com or "
                "host:port (a port only where the index URL writes one), not URLs",
                option=option,
            )
        hosts.add(word.lower())
    return frozenset(hosts)


def approved_hosts(
    hosts: Collection[str] | None = None, env: Mapping[str, str] | None = None
) -> frozenset[str] | None:
    """The hosts a credential may go to: those given, else TORCH_MATRIX_INDEX_HOSTS (set but
    empty: none). None when neither says: every host, as a person's own command has it."""
    if hosts is not None:
        return frozenset(h.lower() for h in hosts)
    text = (os.environ if env is None else env).get(HOSTS_VAR)
    return None if text is None else parse_hosts(text, option=HOSTS_VAR)


def _env_lines(text: str) -> list[tuple[int, str, str | None]]:
    """(line number, name, value) of each line that is not blank or a # comment; value None
    for a line that is not NAME=VALUE with NAME a variable name."""
    lines = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.removesuffix("\r")
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        name, equals, value = line.partition("=")
        lines.append((number, name, value if equals and _NAME.fullmatch(name) else None))
    return lines


def _descriptor(path: str) -> int | None:
    """N, for an env file given as an open descriptor (/dev/fd/N, /proc/self/fd/N)."""
    match = _FD_PATH.fullmatch(path)
    return int(match[1]) if match else None


def read_env_file(path: Path) -> dict[str, str]:
    """The variables of a file of NAME=VALUE lines. An error names the file and the line, and
    never what the line holds: it may be the secret. A descriptor is read once, then closed,
    and what it held kept in this process."""
    if str(path) in _HELD:
        return dict(_HELD[str(path)])
    where = f"{path} ({ENV_FILE_VAR})"
    try:
        with open(path, "rb") as fh:  # a pipe has no size: read up to the cap, and one more
            data = fh.read(ENV_FILE_MAX_BYTES + 1)
        if len(data) > ENV_FILE_MAX_BYTES:
            raise InputError(f"above {ENV_FILE_MAX_BYTES >> 20} MiB: not read", file=where)
        text = data.decode("utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__
        raise InputError(f"cannot read it: {why}", file=where) from None
    found = _variables(text, where)
    descriptor = _descriptor(str(path))
    if descriptor is not None:
        _HELD[str(path)] = dict(found)
        with contextlib.suppress(OSError):
            os.close(descriptor)
    return found


def hold_index_env(env: Mapping[str, str] | None = None) -> None:
    """Read now an env file given as a descriptor, keep its lines here and close it: every
    command calls this first, before it starts any process."""
    path = (os.environ if env is None else env).get(ENV_FILE_VAR)
    if path and _descriptor(path) is not None:
        read_env_file(Path(path))


def _variables(text: str, where: str) -> dict[str, str]:
    found = {}
    for number, name, value in _env_lines(text):
        if value is None:
            raise InputError(
                f"line {number} is not NAME=VALUE with NAME a variable name (letters, digits "
                "and _, not starting with a digit)",
                file=where,
            )
        found[name] = value
    return found


def index_variables(env: Mapping[str, str] | None = None) -> Mapping[str, str]:
    """What ${NAME} in an index URL is expanded from: the environment (default: this
    process's), overlaid with the file TORCH_MATRIX_INDEX_ENV_FILE names, when it names one."""
    source = os.environ if env is None else env
    path = source.get(ENV_FILE_VAR)
    return {**source, **read_env_file(Path(path))} if path else source


def index_secret_names(env: Mapping[str, str]) -> frozenset[str]:
    """The variables that hold or point to index credentials: the lines' and the file's
    variables, and every name the file sets (read leniently: this only withholds)."""
    names = {ENV_LINES_VAR, ENV_FILE_VAR}
    sources = [env.get(ENV_LINES_VAR, "")]
    path = env.get(ENV_FILE_VAR)
    if path in _HELD:
        names.update(_HELD[path])
    elif path and _descriptor(path) is None:  # a descriptor unread here is not read: once only
        with contextlib.suppress(OSError):
            if Path(path).stat().st_size <= ENV_FILE_MAX_BYTES:
                sources.append(Path(path).read_text(encoding="utf-8-sig", errors="replace"))
    for text in sources:
        names.update(name for _, name, value in _env_lines(text) if value is not None)
    return frozenset(names)
