"""The reusable workflow's pull-request path, read as data: one run per pull request, no
decision from a cancelled run, and the matrix gated on `pins`' run output (fail closed)."""

from __future__ import annotations

from typing import Any

import yaml

from tests.helpers import REPO

WORKFLOW = REPO / ".github" / "workflows" / "torch-matrix.yml"


def _workflow() -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load(WORKFLOW.read_text())
    return doc


def test_one_run_per_pull_request_and_newer_pushes_cancel_older() -> None:
    concurrency = _workflow()["concurrency"]
    assert "github.event.pull_request.number" in concurrency["group"]
    assert concurrency["cancel-in-progress"] is True


def test_a_cancelled_run_never_decides() -> None:
    aggregate = _workflow()["jobs"]["aggregate"]
    assert "!cancelled()" in aggregate["if"] and "always()" not in aggregate["if"]


def test_the_matrix_runs_on_pins_run_output_not_on_changed() -> None:
    jobs = _workflow()["jobs"]
    assert jobs["plan"]["outputs"]["run"] == "${{ steps.pins.outputs.run }}"
    assert "needs.plan.outputs.run == 'true'" in jobs["bench"]["if"]
    assert "needs.plan.outputs.run == 'true'" in jobs["aggregate"]["if"]
    steps = {s.get("name"): s for s in jobs["plan"]["steps"]}
    assert steps["Plan the jobs"]["if"] == "steps.pins.outputs.run == 'true'"
    closed = steps["Fail closed on a pin that cannot be read"]
    assert closed["if"] == "steps.pins.outputs.status == 'unknown'"
    assert "ON_UNKNOWN" in closed["env"] and "exit 1" in closed["run"]
    triggers = _workflow()[True]  # YAML 1.1 reads the key `on` as true
    on_unknown = triggers["workflow_call"]["inputs"]["on-unknown-pin"]
    assert on_unknown["default"] == "run"


def test_the_suite_writes_outputs_and_summary_itself() -> None:
    """No inline Python and no copy of the exit-code table: `--github-step` does it."""
    decide = next(s for s in _workflow()["jobs"]["aggregate"]["steps"] if s.get("id") == "decide")
    action = yaml.safe_load((REPO / "action.yml").read_text())
    bench = next(s for s in action["runs"]["steps"] if s.get("id") == "bench")
    for run in (decide["run"], bench["run"]):
        assert "--github-step" in run
        assert "-c '" not in run and "0|4|5|6" not in run
        assert "GITHUB_STEP_SUMMARY" not in run and "GITHUB_OUTPUT" not in run
