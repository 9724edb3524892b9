"""Which environment variables and which values are secrets: one rule, for every place that
records a variable (the environment record in run.json and results), forwards one (into a
container, into a reproduce line) or prints a URL. A secret's value is never written to a file
or printed.

A variable is secret by its name (TOKEN, PASSWORD, _PW, ...) or by its value: a URL with a
user:password, a key=value pair whose key is secret-like (password=..., a DSN's token=...), or
a value shaped like a known token (ghp_..., xoxb-..., AKIA..., hf_..., Bearer ...).
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping

REDACTED = "<redacted>"
# What stands for the user:password of a URL (https://***@host/simple): pip prints the same.
MASK = "***"
# scheme://userinfo@ in a URL anywhere in a text: an index or a proxy with its credential.
_USERINFO = re.compile(r"\b([A-Za-z][A-Za-z0-9+.-]*://)([^/@\s'\"]+)@")
# Matched anywhere in the name, any case: HF_TOKEN, TORCH_API_KEY, NCCL_SECRET, PGPASSWORD,
# FTP_PASSWD, AWS_CREDENTIALS_FILE, TORCH_HUB_AUTH; and PW as a word of it (TORCH_HOME_PW).
SECRET_NAME = re.compile(
    r"TOKEN|SECRET|PASSWORD|PASSWD|KEY|CREDENTIAL|AUTH|(?:^|_)PW(?:_|$)", re.IGNORECASE
)
# key=value (or key: value) inside a value: a DSN's password=, or the NAME=VALUE lines of a
# secret that sets an index's variables (INDEX_TOKEN=...). The key is judged by the name rule
# above, so a value hides what a variable of that name would.
_PAIR = re.compile(r"(?<![\w.-])(-*[A-Za-z_][\w.-]*)(\s*[=:]\s*)(\"[^\"]*\"|'[^']*'|[^\s;&,]+)")
# Keys that are secret in a value though no variable is named so: a DSN's pwd=.
_SECRET_KEYS = frozenset({"pwd", "pass"})
# The shapes of common tokens, whatever variable holds them.
_TOKEN_SHAPE = re.compile(
    r"\b(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}|xox[abprs]-[A-Za-z0-9-]{10,}"
    r"|AKIA[0-9A-Z]{16}|hf_[A-Za-z0-9]{20,}|glpat-[A-Za-z0-9_-]{20,}|sk-[A-Za-z0-9_-]{20,})\b"
    r"|(?i:\bbearer\s+[A-Za-z0-9._~+/=-]{8,})"
)


def is_secret(name: str) -> bool:
    return SECRET_NAME.search(name) is not None


def _mask_pair(match: re.Match[str]) -> str:
    key, separator, _ = match.groups()
    if is_secret(key) or key.lstrip("-").lower() in _SECRET_KEYS:
        return f"{key}{separator}{MASK}"
    return match[0]


def mask_value(value: str) -> str:
    """The value with every credential in it masked: URL userinfo, secret key=value pairs and
    token shapes; what is not secret (a host, a path) stays, as evidence."""
    masked = redact_text(value)
    masked = _PAIR.sub(_mask_pair, masked)
    return _TOKEN_SHAPE.sub(MASK, masked)


def has_secret_value(value: str) -> bool:
    return mask_value(value) != value


def redact(env: Mapping[str, str]) -> dict[str, str]:
    """The variables with every secret's value replaced by REDACTED (by name) or masked (by
    value), sorted by name."""
    return {k: (REDACTED if is_secret(k) else mask_value(v)) for k, v in sorted(env.items())}


def withheld(name: str, value: str) -> bool:
    """Whether a variable is not to be passed on by value: secret by name or value, or already
    redacted or masked in a record."""
    return is_secret(name) or value == REDACTED or has_secret_value(value) or MASK in value


def without_secrets(env: Mapping[str, str]) -> dict[str, str]:
    """The variables less every one withheld (see withheld), sorted by name."""
    return {k: v for k, v in sorted(env.items()) if not withheld(k, v)}


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


# What a GitHub Actions runner exports to a step to reach its own services (the job's token, the
# artifact and cache services, the OIDC token request): credentials whatever their names say.
RUNNER_CREDENTIALS = frozenset(
    {
        "GITHUB_TOKEN",
        "ACTIONS_RUNTIME_TOKEN",
        "ACTIONS_ID_TOKEN_REQUEST_TOKEN",
        "ACTIONS_ID_TOKEN_REQUEST_URL",
        "ACTIONS_RESULTS_URL",
        "ACTIONS_CACHE_URL",
        "ACTIONS_RUNTIME_URL",
    }
)


def for_user_code(env: Mapping[str, str], also: Collection[str] = ()) -> dict[str, str]:
    """The variables a process that runs user code (a worker, a plugin import) may inherit:
    less every withheld one (see withheld), the runner's credentials and the names in `also`."""
    dropped = RUNNER_CREDENTIALS | frozenset(also)
    return {k: v for k, v in without_secrets(env).items() if k not in dropped}
