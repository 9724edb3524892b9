"""The package indexes a side installs torch from, as a pin file names them.

A URL may hold ${NAME} references, which pip itself expands in requirements files: that is how a
team keeps an index's credential out of the repository (https://${INDEX_USER}:${INDEX_TOKEN}@host).
They are expanded from the environment only where pip or a build uses them — a venv's pip gets
them as PIP_INDEX_URL / PIP_EXTRA_INDEX_URL, never in its argv, and an image build as a BuildKit
secret — and everywhere else (cache keys, labels, records, logs) a URL appears credential-free or
masked. A URL whose credential was already masked (https://***@host) is refused: what it stood for
is gone, and installing from the index without it would fail or, worse, install something else.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from suite.core.errors import InputError
from suite.core.secrets import MASK, has_credential, redact_text, without_credential

_REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


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
        self, env: Mapping[str, str] | None = None, *, option: str = "--index-url"
    ) -> Indexes:
        """The URLs with ${NAME} replaced from env (default: this process's environment)."""
        source = os.environ if env is None else env

        def expand(url: str) -> str:
            if f"://{MASK}@" in url:
                raise InputError(
                    f"{url} has a masked credential: pass the index with its credential, or as "
                    "https://${USER_VAR}:${TOKEN_VAR}@host/... with those variables set",
                    option=option,
                )
            missing = [n for n in _REFERENCE.findall(url) if n not in source]
            if missing:
                raise InputError(
                    f"{redact_text(url)} names {', '.join(sorted(set(missing)))}, which "
                    "the environment does not set",
                    option=option,
                )
            return _REFERENCE.sub(lambda m: source[m[1]], url)

        return Indexes(
            expand(self.index_url) if self.index_url else None,
            tuple(expand(u) for u in self.extra_index_urls),
        )

    def needs_secret(self, env: Mapping[str, str] | None = None) -> bool:
        """Whether the expanded URLs carry a credential (then they travel as a secret)."""
        return any(has_credential(u) for u in self.expanded(env).urls())

    def public(self, env: Mapping[str, str] | None = None) -> dict[str, Any]:
        """Credential-free, expanded URLs: what identifies the index in keys, labels and records.
        A changed token changes nothing here; a changed host, path or port does."""
        done = self.expanded(env)
        return {
            "index_url": without_credential(done.index_url) if done.index_url else None,
            "extra_index_urls": [without_credential(u) for u in done.extra_index_urls],
        }

    def pip_env(self, env: Mapping[str, str] | None = None) -> dict[str, str]:
        """PIP_INDEX_URL and PIP_EXTRA_INDEX_URL for a pip process, credentials included."""
        done = self.expanded(env)
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
