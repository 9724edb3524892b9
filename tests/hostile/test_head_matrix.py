"""A hostile head matrix against `plan --head-matrix`: workloads the pull request names at any
path, whose import would run the pull request's code in the plan job (GITHUB_OUTPUT writable:
the plan itself could be rewritten). The head's matrix is YAML only: nothing it adds is
imported, and the note names it as new and not run."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from suite.cli.ci import plan_command

EVIL = """\
import os, pathlib
pathlib.Path({marker!r}).write_text("imported")
with open(os.environ.get("GITHUB_OUTPUT", os.devnull), "a") as out:
    out.write("matrix=owned\\n")

class W:
    name = "w"
    def run(self, ctx):
        pass
"""


def test_the_heads_workloads_are_never_imported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    marker = tmp_path / "imported"
    outside = tmp_path / "x"
    outside.mkdir()
    (outside / "evil.py").write_text(EVIL.format(marker=str(marker)))
    (outside / "evil_module.py").write_text(EVIL.format(marker=str(marker)))
    work = tmp_path / "a" / "b"
    (work / "plugins").mkdir(parents=True)
    (work / "plugins" / "new.py").write_text(EVIL.format(marker=str(marker)))
    monkeypatch.chdir(work)
    monkeypatch.syspath_prepend(str(outside))
    out = tmp_path / "github_output"
    monkeypatch.setenv("GITHUB_OUTPUT", str(out))
    base = work / "matrix.yml"
    base.write_text("version: 1\nbackends: [cpu]\nworkloads:\n  - workload: sdpa\n")
    refs = ["../../x/evil.py:W", f"{outside}/evil.py:W", "evil_module:W", "plugins/new.py:W"]
    head = work / "head.yml"
    head.write_text(
        "version: 1\nbackends: [cpu]\nworkloads:\n  - workload: sdpa\n"
        + "".join(f"  - workload: '{ref}'\n" for ref in refs)
    )
    argv = ["--matrix", str(base), "--head-matrix", str(head)]
    result = CliRunner().invoke(plan_command, argv, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert not marker.exists(), "the head's workload was imported"
    written = out.read_text()
    assert "matrix=owned" not in written
    (note,) = [x for x in written.splitlines() if x.startswith("matrix_note=")]
    assert "names 4 workload(s) new in it, not imported and not run" in note
    assert all(ref in note for ref in refs)


def test_a_head_workload_the_base_names_runs_the_bases_code(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reference the base's matrix also names is the base's code: its cells are expanded
    with it (the head's grid), so the note says which cells the change would add."""
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "github_output"
    monkeypatch.setenv("GITHUB_OUTPUT", str(out))
    base = tmp_path / "matrix.yml"
    base.write_text(
        "version: 1\nbackends: [cpu]\nworkloads:\n  - workload: sdpa\n"
        "    grid: {mask: [none], dtype: [fp32]}\n"
    )
    head = tmp_path / "head.yml"
    head.write_text(
        "version: 1\nbackends: [cpu]\nworkloads:\n  - workload: sdpa\n"
        "    grid: {mask: [none, causal], dtype: [fp32]}\n"
    )
    result = CliRunner().invoke(
        plan_command, ["--matrix", str(base), "--head-matrix", str(head)], catch_exceptions=False
    )
    assert result.exit_code == 0, result.output
    assert "adds 1 cell, which run once it merges: sdpa.causal.fp32" in out.read_text()
