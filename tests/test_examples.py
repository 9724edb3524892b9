"""The README's plugin example runs as written, and the README shows the file as it is; the
example callers pin torch-matrix by a commit of this repository whose workflows are these."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from suite.core.results import read_result
from tests.helpers import REPO, cli

EXAMPLE = REPO / "examples" / "sink_mask.py"


def test_readme_shows_the_example_file() -> None:
    readme = (REPO / "README.md").read_text()
    code = EXAMPLE.read_text()
    body = code[code.index("from __future__") :]
    assert body.strip() in readme


def test_sink_mask_example_runs(tmp_path: Path) -> None:
    out = tmp_path / "run"
    code, _, err = cli(
        "run", "--workload", f"{EXAMPLE}:SinkMask", "--backend", "cpu", "--out", str(out)
    )
    assert code == 0, err
    doc = read_result(out / "cells" / "sink_mask.4.eager.fp32.s256@cpu.json")
    assert doc["status"] == "ok"
    assert doc["correctness"]["passed"]
    assert doc["correctness"]["reference"] == "sdpa with dense sink mask"


PIN = re.compile(
    r"uses: torch-matrix/torch-matrix/\.github/workflows/(torch-matrix(?:-comment)?\.yml)"
    r"@([0-9a-f]{40}) # torch-matrix \S+\n"
)


def test_the_example_callers_pin_a_commit_whose_workflows_are_these() -> None:
    """A tag can be moved to other code: the examples pin a commit SHA (the version in a
    comment, for update tools), and that commit's workflows and action are the ones here, so a team that
    copies the examples runs what this checkout holds."""
    pins = {}
    for name in ("torch-matrix-pr.yml", "torch-matrix-comment.yml"):
        found = PIN.findall((REPO / "examples" / "github" / name).read_text())
        assert len(found) == 1, name
        assert found[0][0] == name.replace("-pr", "")
        pins[name] = found[0][1]
    (commit,) = set(pins.values())  # both callers, one commit
    git = ["git", "-C", str(REPO)]
    if subprocess.run([*git, "rev-parse"], capture_output=True, check=False).returncode:
        pytest.skip("not a git checkout: the pinned commit cannot be looked up")
    known = subprocess.run([*git, "cat-file", "-e", f"{commit}^{{commit}}"], check=False)
    assert known.returncode == 0, f"{commit} is not a commit of this repository"
    diff = subprocess.run(
        [*git, "diff", "--stat", commit, "HEAD", "--", ".github/workflows", "action.yml"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert diff.stdout == "", (
        f"the examples pin {commit[:12]}, whose workflows differ:\n{diff.stdout}"
    )
