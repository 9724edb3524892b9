"""The files a pull request changes, as `plan --changes BASE HEAD` reads them for its
source_notes: from the repository's history through suite/untrusted/git.py (names NUL-separated,
never quoted or dropped, the head's .gitattributes steering nothing), and printed escaped, so a
name cannot add a line to the step outputs or start a workflow command. A pin file whose name
pins escaped (a space as \\x20) is still recognised and left unnamed."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from suite.cli.ci import plan_command

HOSTILE = {
    "notes\n::error::owned\n.md": "x\n",
    "::warning::top.md": "x\n",
    "my reqs.txt": "torch==2.14.1\n",  # a pin file, named as pins writes it: my\x20reqs.txt
    ".gitattributes": "* -diff\n* diff=planted\n",
}


def _git(repo: Path, *args: str) -> str:
    env = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
    return subprocess.run(
        ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.invalid",
         *args],
        check=True, capture_output=True, env=env, timeout=60, text=True,
    ).stdout.strip()  # fmt: skip


@pytest.fixture()
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    _git(root, "init", "-q")
    (root / "README.md").write_text("base\n")
    _git(root, "add", "-A")
    _git(root, "commit", "-q", "-m", "base")
    for name, text in HOSTILE.items():
        (root / name).write_text(text)
    with open(os.fsencode(root) + b"/caf\xe9.py", "w"):  # a name that is not UTF-8
        pass
    _git(root, "add", "-A")
    _git(root, "commit", "-q", "-m", "head")
    return root


def test_changed_names_are_read_whole_and_printed_escaped(repo: Path, tmp_path: Path) -> None:
    matrix = tmp_path / "m.yml"
    matrix.write_text("version: 1\nname: t\nbackends: [cpu]\nworkloads:\n  - workload: sdpa\n")
    out = tmp_path / "output"
    result = CliRunner(env={"GITHUB_OUTPUT": str(out)}).invoke(
        plan_command,
        ["--matrix", str(matrix), "--changes", "HEAD~1", "HEAD", "--repo", str(repo),
         "--pin-files", "my\\x20reqs.txt"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    text = out.read_text()
    block = re.search(r"source_notes<<(\S+)\n(.*?)\n\1\n", text, re.S)
    notes = block[2] if block else re.findall(r"^source_notes=(.*)$", text, re.M)[0]
    (line,) = notes.splitlines()  # one note, one line: no name added a line
    assert line.startswith("this pull request changes 4 other files, none of which ran")
    for printed in ("notes\\x0a::error::owned\\x0a.md", "\\x3a:warning::top.md", "caf\\xe9.py"):
        assert printed in line, line
    assert "reqs.txt" not in line  # the pin file, recognised under its escaped name
    for said in (text, result.stderr, result.stdout):
        assert not [x for x in said.splitlines() if x.lstrip().startswith(("::", "##["))], said


def test_changes_and_a_changed_files_list_are_one_or_the_other(repo: Path, tmp_path: Path) -> None:
    listed = tmp_path / "changed.txt"
    listed.write_text("README.md\n")
    result = CliRunner().invoke(
        plan_command,
        ["--changes", "HEAD~1", "HEAD", "--repo", str(repo), "--changed-files", str(listed)],
    )
    assert result.exit_code == 2 and "--changes" in result.output
    bad = CliRunner().invoke(plan_command, ["--changes", "--evil", "HEAD", "--repo", str(repo)])
    assert bad.exit_code == 2 and "not a ref" in bad.output
