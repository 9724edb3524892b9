"""Text the pull request chose, echoed by the reusable workflow's own shell: the fail-closed
step's warning carries pins' message (which names files), and a newline in it would start a
workflow command of the pull request's. The step's script is taken from the shipped workflow and
run with bash."""

from __future__ import annotations

import subprocess
from pathlib import Path

import yaml

WORKFLOW = Path(__file__).resolve().parents[2] / ".github" / "workflows" / "torch-matrix.yml"


def _step(name: str) -> str:
    doc = yaml.safe_load(WORKFLOW.read_text())
    for job in doc["jobs"].values():
        for step in job.get("steps", []):
            if step.get("name") == name:
                return str(step["run"])
    raise AssertionError(f"no step {name!r} in {WORKFLOW}")


def test_the_fail_closed_warning_is_one_command_whatever_the_message_holds() -> None:
    script = _step("Fail closed on a pin that cannot be read")
    message = "torch pin unknown: a\n::error::owned\r\n::add-mask::x %0A::error::y"
    for on_unknown, candidate in (("warn", "torch==2.14.1"), ("fail", ""), ("warn", "")):
        proc = subprocess.run(
            ["bash", "-c", script],
            env={"PATH": "/usr/bin:/bin", "MESSAGE": message, "ON_UNKNOWN": on_unknown,
                 "CANDIDATE": candidate},
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        lines = proc.stdout.splitlines()
        assert all(not line.startswith("::") or line.startswith(("::warning::", "::error::"))
                   for line in lines), lines  # fmt: skip
        commands = [line for line in lines if line.startswith("::")]
        assert len(commands) == (1 if candidate and on_unknown == "warn" else 2), lines
        assert all("owned" not in c.split("::", 2)[1] for c in commands)
        assert "a%0A::error::owned%0D%0A::add-mask::x %250A::error::y" in commands[0]
