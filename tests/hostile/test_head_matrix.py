"""A hostile head matrix against `plan --head-matrix`: workloads the pull request names at any
path, whose import would run the pull request's code in the plan job (GITHUB_OUTPUT writable:
the plan itself could be rewritten). The head's matrix is YAML only: nothing it adds is
imported: one the base does not name is named as new and not run, and one outside the
repository is an input error."""

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


def _hostile_tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path, Path]:
    """A checkout two levels down (the current directory), a folder outside it holding the
    planted workload, and GITHUB_OUTPUT: (the checkout, the outside folder, the marker)."""
    marker = tmp_path / "imported"
    outside = tmp_path / "x"
    outside.mkdir()
    (outside / "evil.py").write_text(EVIL.format(marker=str(marker)))
    (outside / "evil_module.py").write_text(EVIL.format(marker=str(marker)))
    work = tmp_path / "a" / "b"
    (work / "plugins").mkdir(parents=True)
    (work / "plugins" / "new.py").write_text(EVIL.format(marker=str(marker)))
    (work / "plugins" / "out.py").symlink_to(outside / "evil.py")
    monkeypatch.chdir(work)
    monkeypatch.syspath_prepend(str(outside))
    monkeypatch.setenv("GITHUB_OUTPUT", str(tmp_path / "github_output"))
    (work / "matrix.yml").write_text(
        "version: 1\nbackends: [cpu]\nworkloads:\n  - workload: sdpa\n"
    )
    return work, outside, marker


def _plan_with_head(work: Path, refs: list[str]) -> str:
    head = work / "head.yml"
    head.write_text(
        "version: 1\nbackends: [cpu]\nworkloads:\n  - workload: sdpa\n"
        + "".join(f"  - workload: '{ref}'\n" for ref in refs)
    )
    argv = ["--matrix", str(work / "matrix.yml"), "--head-matrix", str(head)]
    result = CliRunner().invoke(plan_command, argv, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    written = (work.parent.parent / "github_output").read_text()
    assert "matrix=owned" not in written
    (note,) = [x for x in written.splitlines() if x.startswith("matrix_note=")]
    return note


def test_the_heads_workloads_are_never_imported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    work, _, marker = _hostile_tree(tmp_path, monkeypatch)
    refs = ["evil_module:W", "plugins/new.py:W"]
    note = _plan_with_head(work, refs)
    assert not marker.exists(), "the head's workload was imported"
    assert "names 2 workload(s) new in it, not imported and not run" in note
    assert all(ref in note for ref in refs)


@pytest.mark.parametrize("where", ["../../x/evil.py:W", "{outside}/evil.py:W", "plugins/out.py:W"])
def test_a_head_workload_outside_the_repository_is_an_input_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    """Up and out, an absolute path elsewhere, a link in the checkout that points out: the
    head's matrix does not load, the note says why, and the base's matrix ran."""
    work, outside, marker = _hostile_tree(tmp_path, monkeypatch)
    note = _plan_with_head(work, [where.format(outside=outside)])
    assert not marker.exists(), "the head's workload was imported"
    assert "which does not load there" in note and "is outside the repository" in note, note
    assert "$.workloads[1].workload" in note and "the base branch's matrix ran" in note, note


def test_a_base_workload_outside_the_repository_stops_the_plan(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The base's own matrix is held to the same rule: an input error naming the file and the
    field, exit 2, nothing planned and nothing imported."""
    work, _, marker = _hostile_tree(tmp_path, monkeypatch)
    (work / "matrix.yml").write_text(
        "version: 1\nbackends: [cpu]\nworkloads:\n  - workload: sdpa\n"
        "  - workload: '../../x/evil.py:W'\n"
    )
    result = CliRunner().invoke(plan_command, ["--matrix", str(work / "matrix.yml")])
    assert result.exit_code == 2, result.output
    assert "matrix.yml" in result.output and "$.workloads[1].workload" in result.output
    assert "outside the repository" in result.output
    assert not marker.exists()
    assert not (tmp_path / "github_output").exists()


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
