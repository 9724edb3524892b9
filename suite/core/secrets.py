"""Which environment variables are secrets: one rule, for every place that records a variable
(the environment record in run.json and results) or forwards one (into a container, into a
reproduce line). A secret's value is never written to a file or printed."""

from __future__ import annotations

import re
from collections.abc import Mapping

REDACTED = "<redacted>"
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
