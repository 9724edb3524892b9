"""What a command leaves for a GitHub Actions step: outputs in $GITHUB_OUTPUT and the job
summary in $GITHUB_STEP_SUMMARY. Both are no-ops outside Actions, so commands call them freely."""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path

from suite.core.decision_records import DecisionRecord
from suite.core.errors import EnvironmentProblem, InputError, SuiteError
from suite.core.secrets import redact_text
from suite.report.escape import code_block
from suite.report.markdown import render_markdown


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


# GitHub refuses a job summary above 1 MiB (for the whole step); a margin keeps what the
# workflow's shell adds after the report inside it.
SUMMARY_MAX_BYTES = (1 << 20) - 4096


def append_summary(decision: DecisionRecord, path: Path, full_report_url: str | None) -> int:
    """Append the report to a job summary, cut to fit beside what the file holds; returns the
    bytes written."""
    try:
        used = path.stat().st_size if path.exists() else 0
    except OSError as exc:
        raise InputError(
            f"cannot read the summary file: {exc}", file=str(path), option="--summary"
        ) from None
    room = max(0, SUMMARY_MAX_BYTES - used)
    text = render_markdown(decision, max_bytes=room, full_report_url=full_report_url)
    data = text.encode("utf-8")
    try:
        with open(path, "ab") as fh:
            fh.write(data)
    except OSError as exc:
        raise InputError(
            f"cannot append to the summary file: {exc}", file=str(path), option="--summary"
        ) from None
    return len(data)


@contextlib.contextmanager
def step_outputs_on_error(enabled: bool, out: Path | None = None) -> Iterator[None]:
    """In a GitHub Actions step (enabled: --github-step), a command that ends in an error still
    leaves its outputs — decision empty, so no later step reads a pass — and says why in the job
    summary; the error then ends the command with its own exit code."""
    try:
        yield
    except (SuiteError, OSError) as exc:
        if enabled:
            with contextlib.suppress(SuiteError, OSError):
                outputs = {"decision": "", "error": redact_text(str(exc).splitlines()[0])}
                if out is not None:
                    outputs["results-path"] = str(out)
                write_github_output(outputs)
                summary = os.environ.get("GITHUB_STEP_SUMMARY")
                if summary:
                    with open(summary, "a", encoding="utf-8") as fh:
                        fh.write(
                            "## torch-matrix: **NO DECISION**\n\nThe run stopped before it "
                            f"could decide:\n\n{code_block(redact_text(str(exc)))}\n"
                        )
        raise
