"""In a run that judges a pull request, only the pin moves: no Python a job starts imports from
the checkout, the bench and aggregate jobs work in the tree the plan judged from (the base
commit), the plan imports the matrix's workloads with an empty environment, and the decision
names what the pull request changed that did not run."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from tests.helpers import REPO

WORKFLOWS = sorted((REPO / ".github" / "workflows").glob("*.yml"))
# A Python started with -m or -c (or a script on stdin) but without -I: it would import
# suite/, pip/, sitecustomize.py and friends from its working directory, a checkout.
UNISOLATED = re.compile(r"""(?:python[0-9.]*|PYTHON|driver)\}?"?\s+(?:-m|-c|-)(?:\s|$)""", re.I)


def _scripts() -> dict[str, str]:
    """Every shell script the workflows and the action run, and the macOS recipe."""
    found: dict[str, str] = {}
    for path in [*WORKFLOWS, REPO / "action.yml"]:
        doc: Any = yaml.safe_load(path.read_text())
        jobs = doc.get("jobs") or {"action": {"steps": doc["runs"]["steps"]}}
        for job_name, job in jobs.items():
            for i, step in enumerate(job.get("steps") or []):
                if "run" in step:
                    found[f"{path.name}:{job_name}:{step.get('name', i)}"] = step["run"]
    found["images/macos/ab.sh"] = (REPO / "images" / "macos" / "ab.sh").read_text()
    return found


def test_every_python_a_job_starts_runs_isolated() -> None:
    scripts = _scripts()
    assert len(scripts) > 20
    bad = [
        f"{where}: {line.strip()}"
        for where, text in scripts.items()
        for line in text.splitlines()
        if UNISOLATED.search(line) and not line.lstrip().startswith("#")
    ]
    assert bad == []
    # The check sees what it looks for.
    assert UNISOLATED.search('"$PYTHON" -m suite plan') and UNISOLATED.search("python3 -c 'x'")
    assert not UNISOLATED.search('"$PYTHON" -I -m suite plan')


def test_a_planted_suite_in_the_working_directory_never_runs(tmp_path: Path) -> None:
    """What -I guards against, on this machine's Python: in a folder holding suite/__main__.py
    and sitecustomize.py, `python -m suite` runs the planted module; `python -I -m suite`
    runs the installed suite and imports neither."""
    mark = tmp_path / "mark"
    planted = f"open({str(mark)!r}, 'a').write('ran\\n')\nprint('decision=adopt')\n"
    (tmp_path / "suite").mkdir()
    (tmp_path / "suite" / "__main__.py").write_text(planted)
    (tmp_path / "sitecustomize.py").write_text(planted)
    run = [sys.executable, "-m", "suite", "--version"]
    plain = subprocess.run(run, cwd=tmp_path, capture_output=True, text=True, check=False)
    assert "decision=adopt" in plain.stdout and mark.exists()  # the hole is real
    mark.unlink()
    isolated = subprocess.run(
        [sys.executable, "-I", *run[1:]], cwd=tmp_path, capture_output=True, text=True, check=False
    )
    assert isolated.returncode == 0, isolated.stderr
    assert "decision=adopt" not in isolated.stdout and not mark.exists()
    assert "torch-matrix" in isolated.stdout


def _steps(job: str) -> list[dict[str, Any]]:
    doc: Any = yaml.safe_load((REPO / ".github" / "workflows" / "torch-matrix.yml").read_text())
    steps: list[dict[str, Any]] = doc["jobs"][job]["steps"]
    return steps


def test_bench_and_aggregate_work_in_the_tree_the_plan_judged_from() -> None:
    for job, sha in (("bench", "tree-sha"), ("aggregate", "base-sha")):
        checkout, offline, place = _steps(job)[:3]
        assert offline["if"] == "env.ACT != ''" and "ref" not in offline["with"]
        assert checkout["uses"].startswith("actions/checkout@")
        assert checkout["with"]["ref"] == f"${{{{ needs.plan.outputs.{sha} }}}}"
        assert place["env"]["TREE_SHA"] == checkout["with"]["ref"]
        assert 'checkout -q --force --detach "$TREE_SHA"' in place["run"]
        assert "clean -q -ffdx" in place["run"]
    plan = next(s for s in _steps("plan") if s.get("id") == "plan")["run"]
    assert 'git archive --format=tar "$sha" | tar -x -C "$tree"' in plan
    assert 'cd "$tree"' in plan and "env -i PATH=" in plan


def test_the_decision_names_what_the_pull_request_changed_that_did_not_run() -> None:
    from suite.flows.pr_changes import change_notes

    changed = [
        ".github/torch-matrix.yml", ".github/torch-matrix-policy.yml", "plugins/team.py",
        "requirements.txt", "suite/__main__.py", "sitecustomize.py",
    ]  # fmt: skip
    notes = change_notes(
        changed, plugins=["plugins/team.py"], pin_files=["requirements.txt"],
        matrix_file=".github/torch-matrix.yml", policy_file=".github/torch-matrix-policy.yml",
    )  # fmt: skip
    assert notes == [
        "this pull request changes plugins/team.py, workload code of the matrix: the base "
        "branch's version ran",
        "this pull request changes .github/torch-matrix-policy.yml; the base branch's policy "
        "was applied",
        "this pull request changes 2 other files, none of which ran for this verdict (the "
        "suite, matrix, policy and workloads came from the base commit): suite/__main__.py, "
        "sitecustomize.py",
    ]
    new_matrix = change_notes(
        ["plugins/team.py"], plugins=["plugins/team.py"], pin_files=[],
        matrix_file="m.yml", policy_file=None, matrix_from_head=True,
    )  # fmt: skip
    assert new_matrix == [
        "the matrix m.yml is new in this pull request: its workloads are the head's, run only "
        "inside the sides' containers"
    ]
    assert change_notes(["requirements.txt"], plugins=[], pin_files=["requirements.txt"],
                        matrix_file=None, policy_file=None) == []  # fmt: skip


def test_plan_writes_the_notes_from_the_changed_files(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from suite.cli.ci import plan_command

    matrix = tmp_path / "m.yml"
    plugin = REPO / "tests" / "plugins" / "team_bench.py"
    matrix.write_text(f"version: 1\nname: t\nworkloads:\n  - workload: {plugin}:TeamBench\n")
    changed = tmp_path / "changed.txt"
    changed.write_text(f"{plugin}\nrequirements.txt\nsuite/__main__.py\n")
    out = tmp_path / "output"
    result = CliRunner(env={"GITHUB_OUTPUT": str(out)}).invoke(
        plan_command,
        ["--matrix", str(matrix), "--changed-files", str(changed), "--pin-files",
         "requirements.txt"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    text = out.read_text()
    block = re.search(r"source_notes<<(\S+)\n(.*?)\n\1\n", text, re.S)
    assert block, text
    lines = block[2].splitlines()
    assert lines[0].startswith(f"this pull request changes {plugin}, workload code")
    assert lines[1].endswith("came from the base commit): suite/__main__.py")
    # A list of changed files that cannot be read is an error naming it.
    bad = CliRunner().invoke(plan_command, ["--matrix", str(matrix), "--changed-files", "nope"])
    assert bad.exit_code == 2 and "nope" in bad.output
