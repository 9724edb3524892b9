"""What a command leaves for a GitHub Actions step: outputs in $GITHUB_OUTPUT and the job
summary in $GITHUB_STEP_SUMMARY. Both are no-ops outside Actions, so commands call them freely."""

from __future__ import annotations

import os
import uuid
from collections.abc import Mapping

from suite.errors import EnvironmentProblem


def write_github_output(values: Mapping[str, str]) -> None:
    """Append step outputs to $GITHUB_OUTPUT, when set; a no-op outside GitHub Actions."""
    target = os.environ.get("GITHUB_OUTPUT")
    if not target:
        return
    text = ""
    for key, value in values.items():
        if "\n" in value or "\r" in value:
            # A fresh delimiter each time, so that no value can end the block early.
            delimiter = f"ghadelimiter_{uuid.uuid4().hex}"
            text += f"{key}<<{delimiter}\n{value}\n{delimiter}\n"
        else:
            text += f"{key}={value}\n"
    try:
        with open(target, "a", encoding="utf-8") as fh:
            fh.write(text)
    except OSError as exc:
        raise EnvironmentProblem(f"cannot append to GITHUB_OUTPUT ({target}): {exc}") from None
