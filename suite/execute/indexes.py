"""The package indexes a side installs torch from, as a pin file names them.

A URL may hold ${NAME} references, which pip itself expands in requirements files: that is how a
team keeps an index's credential out of the repository (https://${INDEX_USER}:${INDEX_TOKEN}@host).
They are expanded from the environment only where pip or a build uses them — a venv's pip gets
them as PIP_INDEX_URL / PIP_EXTRA_INDEX_URL, never in its argv, and an image build as a BuildKit
secret — and everywhere else (cache keys, labels, records, logs) a URL appears credential-free or
masked. A URL whose credential was already masked (https://***@host) is refused: what it stood for
is gone, and installing from the index without it would fail or, worse, install something else.

Where the approved index hosts are known (an argument, or TORCH_MATRIX_INDEX_HOSTS set, even
empty: suite/core/index_access.py), as in a run that judges a pull request, a URL on any other
host is not used at all: the side is refused (an InputError naming the host), never installed
from the indexes that are left, which could hold another torch. The host is read before
substitution. The values come from the environment overlaid with the file
TORCH_MATRIX_INDEX_ENV_FILE names. One pip process holds the credential of one host at most: a
side whose URLs carry credentials for two hosts is refused, so that no index's package can read
another index's credential.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from suite.core.errors import InputError
from suite.core.index_access import (
    ENV_FILE_VAR,
    HOSTS_VAR,
    REFERENCE,
    approved_hosts,
    host_part,
    index_host,
    index_variables,
    without_userinfo,
)
from suite.core.secrets import MASK, has_credential, redact_text, without_credential


@dataclass(frozen=True)
class Indexes:
    """--index-url and --extra-index-url of one side, as written (references unexpanded)."""

    index_url: str | None = None
    extra_index_urls: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.index_url or self.extra_index_urls)

    def urls(self) -> tuple[str, ...]:
        return (*((self.index_url,) if self.index_url else ()), *self.extra_index_urls)

    def expanded(
        self,
        env: Mapping[str, str] | None = None,
        *,
        option: str = "--index-url",
        hosts: Collection[str] | None = None,
    ) -> Indexes:
        """The URLs with ${NAME} replaced from env (default: this process's environment), and
        the file TORCH_MATRIX_INDEX_ENV_FILE names; only on approved hosts, where they are known
        (hosts, else TORCH_MATRIX_INDEX_HOSTS)."""
        approved = approved_hosts(hosts, env)
        # The file is read only where a URL names a variable.
        named = any(REFERENCE.search(u) for u in self.urls())
        source = index_variables(env) if named else {}

        def expand(url: str) -> str:
            if f"://{MASK}@" in url:
                raise InputError(
                    f"{url} has a masked credential: pass the index with its credential, or as "
                    "https://${USER_VAR}:${TOKEN_VAR}@host/... with those variables set",
                    option=option,
                )
            if approved is not None and index_host(url) not in approved:
                _unapproved(url, option)
            missing = [n for n in REFERENCE.findall(url) if n not in source]
            if missing:
                raise InputError(
                    f"{redact_text(url)} names {', '.join(sorted(set(missing)))}, which "
                    f"the environment does not set (nor a file {ENV_FILE_VAR} names)",
                    option=option,
                )
            return REFERENCE.sub(lambda m: source[m[1]], url)

        done = Indexes(
            expand(self.index_url) if self.index_url else None,
            tuple(expand(u) for u in self.extra_index_urls),
        )
        _one_credential(self.urls(), done.urls(), option)
        return done

    def needs_secret(
        self, env: Mapping[str, str] | None = None, *, hosts: Collection[str] | None = None
    ) -> bool:
        """Whether the expanded URLs carry a credential (then they travel as a secret)."""
        return any(has_credential(u) for u in self.expanded(env, hosts=hosts).urls())

    def public(
        self, env: Mapping[str, str] | None = None, *, hosts: Collection[str] | None = None
    ) -> dict[str, Any]:
        """Credential-free, expanded URLs: what identifies the index in keys, labels and records.
        A changed token changes nothing here; a changed host, path or port does."""
        done = self.expanded(env, hosts=hosts)
        return {
            "index_url": without_credential(done.index_url) if done.index_url else None,
            "extra_index_urls": [without_credential(u) for u in done.extra_index_urls],
        }

    def pip_env(
        self, env: Mapping[str, str] | None = None, *, hosts: Collection[str] | None = None
    ) -> dict[str, str]:
        """PIP_INDEX_URL and PIP_EXTRA_INDEX_URL for a pip process, credentials included where
        their host is approved."""
        done = self.expanded(env, hosts=hosts)
        out = {}
        if done.index_url:
            out["PIP_INDEX_URL"] = done.index_url
        if done.extra_index_urls:
            out["PIP_EXTRA_INDEX_URL"] = " ".join(done.extra_index_urls)
        return out

    def shown(self) -> str:
        """For messages and logs: the URLs as written, any literal credential masked."""
        parts = [f"--index-url {redact_text(self.index_url)}"] if self.index_url else []
        parts += [f"--extra-index-url {redact_text(u)}" for u in self.extra_index_urls]
        return " ".join(parts)


def _unapproved(url: str, option: str) -> None:
    """Refuse a URL on a host that is not approved (InputError naming the option and the host):
    the side it belongs to is not run, rather than run from the indexes left."""
    host = index_host(url)
    fix = (
        "so this side is not installed at all (nor from the other indexes, which could hold "
        "another torch): approve the host in the base branch's pin files or the workflow's "
        "index-hosts"
    )
    if host is None:
        said = host_part(url)
        where = f"host part {said!r}" if said else "host"
        raise InputError(
            f"{redact_text(without_userinfo(url))}: its {where} cannot be checked against the "
            f"approved index hosts ({HOSTS_VAR}), {fix}",
            option=option,
        )
    raise InputError(
        f"{redact_text(without_userinfo(url))}: host {host} is not among the approved index "
        f"hosts ({HOSTS_VAR}), {fix}",
        option=option,
    )


def _one_credential(written: tuple[str, ...], expanded: tuple[str, ...], option: str) -> None:
    """Refuse credentials for two hosts in one side's URLs: pip would hold both at once."""
    pairs = zip(written, expanded, strict=True)
    hosts = {index_host(w) or host_part(w) for w, e in pairs if has_credential(e)}
    if len(hosts) > 1:
        raise InputError(
            f"the index URLs carry credentials for {len(hosts)} hosts "
            f"({', '.join(sorted(str(h) for h in hosts))}): one pip process holds the "
            "credential of one host at most; serve torch and its companions from one "
            "credentialed index",
            option=option,
        )
