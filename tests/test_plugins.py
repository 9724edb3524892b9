"""A team's own workload, loaded as module:object, as a file path, and from an entry point."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from suite.core.errors import WorkloadError
from suite.core.results import read_result, read_run
from suite.workloads import resolve
from tests.helpers import REPO, cli, planted


def test_module_object_reference(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)  # the worker gets the caller's directory on sys.path
    out = tmp_path / "run"
    code, _, err = cli(
        "run", "--workload", "tests.plugins.planted:Quick", "--backend", "cpu", "--out", str(out)
    )
    assert code == 0, err
    doc = read_result(out / "cells" / "quick.8@cpu.json")
    assert doc["status"] == "ok"
    assert doc["source"]["module"] == "tests.plugins.planted"
    assert doc["spec"]["ref"] == "tests.plugins.planted:Quick"


def test_entry_point(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    site = tmp_path / "site"
    dist = site / "team_workloads-1.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: team-workloads\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(
        "[torch_matrix.workloads]\nteam_quick = tests.plugins.planted:Quick\n"
    )
    monkeypatch.chdir(REPO)
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setenv("PYTHONPATH", str(site))
    assert resolve("team_quick").workload.name == "quick"
    out = tmp_path / "run"
    code, _, err = cli("run", "--workload", "team_quick", "--backend", "cpu", "--out", str(out))
    assert code == 0, err
    run = read_run(out / "run.json")
    assert run["workloads"]["team_quick"]["module"] == "tests.plugins.planted"
    assert read_result(out / "cells" / "quick.16@cpu.json")["status"] == "ok"


def test_plugin_in_matrix_file(tmp_path: Path) -> None:
    matrix = tmp_path / "m.yaml"
    matrix.write_text(
        f"version: 1\nbackends: [cpu]\nworkloads:\n"
        f"  - workload: '{planted('Quick')}'\n    lane: prototype\n    grid: {{n: [32]}}\n"
    )
    out = tmp_path / "run"
    code, _, err = cli("run", "--matrix", str(matrix), "--out", str(out))
    assert code == 0, err
    doc = read_result(out / "cells" / "quick.32@cpu.json")
    assert doc["spec"]["lane"] == "prototype"


@pytest.mark.parametrize(
    ("ref", "message"),
    [
        ("no_such_workload", "unknown workload 'no_such_workload'"),
        ("tests.plugins.nope:X", "importing 'tests.plugins.nope'"),
        (f"{planted('Missing')}", "has no attribute 'Missing'"),
        ("suite.core.errors:SuiteError", "neither a Workload subclass"),
    ],
)
def test_bad_references(ref: str, message: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)
    with pytest.raises(WorkloadError, match=message):
        resolve(ref)
    code, _, err = cli("run", "--workload", ref, "--out", "/nonexistent/never-created")
    assert code == 2
    assert "Traceback" not in err and message.split("'")[0] in err
    assert not Path("/nonexistent/never-created").exists()


def test_a_file_plugin_leaves_sys_path_and_sys_modules_as_they_were(tmp_path: Path) -> None:
    """Resolving a plugin by file path imports it without adding its folder to sys.path, so
    a second team's plugin of the same module name cannot shadow it or a library."""
    plugin = tmp_path / "team" / "json.py"  # a name that would shadow the standard library
    plugin.parent.mkdir()
    plugin.write_text((REPO / "tests" / "plugins" / "planted.py").read_text())
    path_before, json_before = list(sys.path), sys.modules["json"]
    resolved = resolve(f"{plugin}:Quick")
    assert resolved.workload.name == "quick"
    assert sys.path == path_before and str(plugin.parent) not in sys.path
    assert sys.modules["json"] is json_before


def test_a_plugin_edited_mid_run_fails_its_cells(tmp_path: Path) -> None:
    from suite.execute.environment import RunOptions
    from suite.execute.runner import run_matrix
    from suite.workloads.matrix import select_cells as plan

    plugin = tmp_path / "team" / "bench.py"
    plugin.parent.mkdir()
    plugin.write_text((REPO / "tests" / "plugins" / "planted.py").read_text())
    ref = f"{plugin}:Quick"
    matrix, cells, resolved = plan(None, [ref], ["cpu"], ["quick.8@cpu"], None)
    kept = run_matrix(matrix, RunOptions(out=tmp_path / "kept"), cells=cells, resolved=resolved)
    assert kept.statuses == {"quick.8@cpu": "ok"}
    plugin.write_text(plugin.read_text() + "\n# edited after the run recorded it\n")
    edited = run_matrix(matrix, RunOptions(out=tmp_path / "edited"), cells=cells, resolved=resolved)
    assert edited.statuses == {"quick.8@cpu": "failed"}
    record = read_result(tmp_path / "edited" / "cells" / "quick.8@cpu.json")
    assert record["failure"]["mode"] == "source-changed"
    assert str(plugin) in record["failure"]["message"]
