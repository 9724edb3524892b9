"""The child that imports plugins first (suite/execute/plugins.py) runs in the judging tree's
folder: a `suite/` folder the pull request plants there must not run in place of the suite."""

from __future__ import annotations

from pathlib import Path

from suite.execute.plugins import check_plugins


def test_a_planted_suite_in_the_current_folder_never_runs(tmp_path: Path) -> None:
    marker = tmp_path / "planted-ran"
    planted = tmp_path / "checkout" / "suite" / "worker"
    planted.mkdir(parents=True)
    for init in (planted.parent / "__init__.py", planted / "__init__.py"):
        init.write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    (planted / "plugins.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    plugin = tmp_path / "checkout" / "team.py"
    plugin.write_text("class W:\n    name = 'w'\n    def run(self, ctx):\n        pass\n")
    # A plugin beside the planted folder still imports: the current folder stays on the path.
    check_plugins(["team:W"], cwd=tmp_path / "checkout")
    assert not marker.exists()
