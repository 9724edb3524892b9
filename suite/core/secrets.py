"""Which environment variables are secrets: one rule, for every place that records a variable
(the environment record in run.json and results) or forwards one (into a container, into a
reproduce line). A secret's value is never written to a file or printed."""

from __future__ import annotations

import re
from collections.abc import Mapping

REDACTED = "<redacted>"
# What stands for the user:password of a URL (https://***@host/simple): pip prints the same.
MASK = "***"
# scheme://userinfo@ in a URL anywhere in a text: an index or a proxy with its credential.
_USERINFO = re.compile(r"\b([A-Za-z][A-Za-z0-9+.-]*://)([^/@\s'\"]+)@")
# Matched anywhere in the name, any case: HF_TOKEN, TORCH_API_KEY, NCCL_SECRET, PGPASSWORD,
# FTP_PASSWD, AWS_CREDENTIALS_FILE, TORCH_HUB_AUTH.
SECRET_NAME = re.compile(r"TOKEN|SECRET|PASSWORD|PASSWD|KEY|CREDENTIAL|AUTH", re.IGNORECASE)


def is_secret(name: str) -> bool:
    return SECRET_NAME.search(name) is not None


def redact(env: Mapping[str, str]) -> dict[str, str]:
    """The variables with every secret's value replaced by REDACTED, sorted by name."""
    return {k: (REDACTED if is_secret(k) else v) for k, v in sorted(env.items())}


def without_secrets(env: Mapping[str, str]) -> dict[str, str]:
    """The variables less every secret and every value already redacted, sorted by name."""
    return {k: v for k, v in sorted(env.items()) if not is_secret(k) and v != REDACTED}


# A userinfo of ${NAME} references only names variables (pip expands them): no secret in it.
_REFERENCES = re.compile(r"\$\{[A-Za-z_][A-Za-z0-9_]*\}(:\$\{[A-Za-z_][A-Za-z0-9_]*\})?")


def redact_text(text: str) -> str:
    """The text with the credential of every URL in it (scheme://user:token@host) masked; a
    userinfo made of ${NAME} references alone stays, as it holds no secret."""
    return _USERINFO.sub(lambda m: m[0] if _REFERENCES.fullmatch(m[2]) else f"{m[1]}{MASK}@", text)


def has_credential(url: str) -> bool:
    """Whether the URL carries a literal credential (a userinfo that is not only references)."""
    return any(not _REFERENCES.fullmatch(m[2]) for m in _USERINFO.finditer(url))


def without_credential(url: str) -> str:
    """The URL with no userinfo at all: what identifies an index (cache keys, labels), which a
    changed token does not change."""
    return _USERINFO.sub(lambda m: m[1], url)
