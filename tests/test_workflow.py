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


def test_one_run_per_pull_request_and_matrix_and_newer_pushes_cancel_older() -> None:
    concurrency = _workflow()["concurrency"]
    assert "github.event.pull_request.number" in concurrency["group"]
    assert "inputs.matrix-file" in concurrency["group"]  # a second matrix is not cancelled
    assert concurrency["cancel-in-progress"] is True


def test_every_artifact_of_a_run_carries_its_matrix_name() -> None:
    """Two matrices of one repository neither overwrite nor read each other's results: the
    bench jobs' artifacts, the aggregate's download of them and the decision it uploads are
    all named after the matrix (plan's name output), and the comment workflow comments once
    per decision artifact, under that name."""
    jobs = _workflow()["jobs"]
    assert jobs["plan"]["outputs"]["matrix-name"] == "${{ steps.plan.outputs.name }}"
    name = "${{ needs.plan.outputs.matrix-name }}"
    bench = next(s for s in jobs["bench"]["steps"] if "artifact-name" in s.get("with", {}))
    assert bench["with"]["artifact-name"] == f"torch-matrix-job~{name}~${{{{ matrix.job }}}}"
    steps = {s.get("name"): s for s in jobs["aggregate"]["steps"]}
    assert steps["Download every job's results"]["with"]["pattern"] == f"torch-matrix-job~{name}~*"
    collect = steps["Collect every job's results (offline runs)"]
    assert collect["env"]["MATRIX_NAME"] == name and '~"$MATRIX_NAME"~*' in collect["run"]
    upload = steps["Upload the decision for the comment workflow"]
    assert upload["with"]["name"] == f"torch-matrix-comment~{name}"
    keep = steps["Keep the decision in a local folder (offline runs)"]
    assert keep["env"]["FOLDER"] == f"torch-matrix-comment~{name}"
    comment = yaml.safe_load((WORKFLOW.parent / "torch-matrix-comment.yml").read_text())
    posts = {s.get("name"): s for s in comment["jobs"]["comment"]["steps"]}
    assert posts["Download the decision artifacts"]["with"]["pattern"] == "torch-matrix-comment~*"
    post = posts[
        "Post or update the sticky comment of each matrix, or mark the earlier heads' ones"
    ]["run"]
    assert '--name "$name"' in post and "exit 0" in post


def test_a_cancelled_run_never_decides() -> None:
    aggregate = _workflow()["jobs"]["aggregate"]
    assert "!cancelled()" in aggregate["if"] and "always()" not in aggregate["if"]


def test_the_matrix_runs_on_pins_run_output_not_on_changed() -> None:
    jobs = _workflow()["jobs"]
    assert jobs["plan"]["outputs"]["run"] == "${{ steps.pins.outputs.run }}"
    assert "needs.plan.outputs.run == 'true'" in jobs["bench"]["if"]
    assert "needs.plan.outputs.run == 'true'" in jobs["aggregate"]["if"]
    steps = {s.get("name"): s for s in jobs["plan"]["steps"]}
    assert (
        steps["Plan the jobs from the base commit's tree"]["if"]
        == "steps.pins.outputs.run == 'true'"
    )
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


def test_the_readme_shows_the_example_callers_as_they_are() -> None:
    """The copy-paste callers in the README are the example files, byte for byte."""
    readme = (REPO / "README.md").read_text()
    for name in ("torch-matrix-pr.yml", "torch-matrix-comment.yml"):
        text = (REPO / "examples" / "github" / name).read_text()
        assert f"```yaml\n{text.rstrip()}\n```" in readme, name


def test_every_job_runs_the_action_of_the_commit_it_was_called_at() -> None:
    """No job names torch-matrix by owner and tag: each fetches the workflow's own commit
    (job.workflow_sha) and then uses the action from that folder."""
    for path in (WORKFLOW, WORKFLOW.parent / "torch-matrix-comment.yml"):
        doc = yaml.safe_load(path.read_text())
        assert "torch-matrix@" not in path.read_text(), path
        for name, job in doc["jobs"].items():
            steps = job.get("steps", [])
            uses = [i for i, s in enumerate(steps) if s.get("uses") == "./.torch-matrix"]
            if not uses:
                continue
            fetch = next(
                i for i, s in enumerate(steps) if s.get("name", "").startswith("Fetch torch-matrix")
            )
            assert fetch < uses[0], (path.name, name)
            env = steps[fetch]["env"]
            assert env["WORKFLOW_SHA"] == "${{ job.workflow_sha }}"
            assert env["WORKFLOW_REPOSITORY"] == "${{ job.workflow_repository }}"
        for step in (s for job in doc["jobs"].values() for s in job.get("steps", [])):
            # a step that runs the suite runs the action's environment, not the runner's Python
            python = (step.get("env") or {}).get("PYTHON")
            assert python in (None, "${{ steps.setup.outputs.python }}"), (path.name, step)
