"""One edge for every command: a typed error is its message and exit code, Ctrl-C is exit 130,
and neither prints a traceback."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from suite.cli.main import main
from suite.core.errors import EnvironmentProblem


def _interrupt(*_: Any, **__: Any) -> Any:
    raise KeyboardInterrupt


def _unreachable(*_: Any, **__: Any) -> Any:
    raise EnvironmentProblem("GitHub could not be reached")


# command line, and the function it reaches first that can be made to raise
COMMANDS = {
    "pins": (["pins", "--base", "A", "--head", "B"], "suite.pins.assess.tree_at_ref"),
    "plan": (["plan", "--workload", "sdpa"], "suite.flows.plan.plan"),
    "run": (["run", "--workload", "sdpa", "--backend", "cpu"], "suite.execute.runner.run_matrix"),
    "comment": (
        ["comment", "--decision", "DECISION", "--repo", "o/r", "--pr", "1"],
        "suite.cli.comment._post",
    ),
    "repro": (["repro", "x@cpu", "--results", "RESULTS"], "suite.flows.repro.locate"),
}


@pytest.mark.parametrize("command", sorted(COMMANDS))
@pytest.mark.parametrize(
    ("raiser", "code", "text"),
    [
        (_interrupt, 130, "torch-matrix: interrupted"),
        (_unreachable, 3, "torch-matrix: error: GitHub could not be reached"),
    ],
)
def test_every_command_maps_errors_and_ctrl_c_alike(
    command: str, raiser: Any, code: int, text: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    argv, target = COMMANDS[command]
    argv = [str(tmp_path / a) if a in ("DECISION", "RESULTS") else a for a in argv]
    module, name = target.rsplit(".", 1)
    monkeypatch.setattr(f"{module}.{name}", raiser)
    result = CliRunner().invoke(main, argv)
    assert result.exit_code == code, (result.output, result.exception)
    assert text in result.stderr
    assert "Traceback" not in result.output
    assert not isinstance(result.exception, KeyboardInterrupt | EnvironmentProblem)


@pytest.mark.parametrize("role", ["baseline", "candidate"])
def test_a_bad_side_names_its_option(role: str, tmp_path: Path) -> None:
    other = "candidate" if role == "baseline" else "baseline"
    argv = ["ab", f"--{role}", "nonsense-side", f"--{other}", "current", "--out", str(tmp_path)]
    result = CliRunner().invoke(main, [*argv, "--workload", "sdpa"])
    assert result.exit_code == 2, result.output
    assert f"torch-matrix: error: --{role}: 'nonsense-side' is neither" in result.stderr
    assert "::" not in result.stderr  # an option is not a JSON path


def test_an_option_error_with_a_file_names_both() -> None:
    from suite.core.errors import InputError

    error = InputError("neither a run directory", file="/r", option="--results")
    assert str(error) == "--results /r: neither a run directory"
    assert error.path is None and error.option == "--results"


def test_the_decisions_reproduce_line_is_what_repro_prints_and_it_reruns(tmp_path: Path) -> None:
    import json
    import os
    import subprocess
    import sys

    from tests.helpers import cli
    from tests.plugins.team_bench import FAIL_VAR

    plugin = f"{Path(__file__).parent / 'plugins' / 'team_bench.py'}:TeamBench"
    runs = {side: tmp_path / side for side in ("base", "cand")}
    code, _, stderr = cli(
        "run", "--workload", plugin, "--timeout", "120", "--out", str(runs["base"])
    )
    assert code == 0, stderr
    failing = {**os.environ, FAIL_VAR: "2."}  # the candidate's torch fails the cell
    cand = [sys.executable, "-m", "suite", "run", "--workload", plugin, "--timeout", "120"]
    done = subprocess.run(
        [*cand, "--out", str(runs["cand"])], env=failing, capture_output=True, text=True
    )
    assert done.returncode == 1, done.stderr
    code, stdout, _ = cli("compare", str(runs["base"]), str(runs["cand"]), "--format", "json")
    (cell,) = [c for c in json.loads(stdout)["cells"] if c["repro"]]
    line = cell["repro"]["command"]
    printed = CliRunner().invoke(main, ["repro", cell["cell_id"], "--results", str(runs["cand"])])
    assert printed.exit_code == 0, printed.output
    assert printed.stdout.strip() == line
    assert "--timeout 120" in line and "--memory-limit" in line  # the run's limits kept
    for _ in range(2):  # each paste writes a new folder; none overwrites another
        pasted = subprocess.run(
            line, shell=True, capture_output=True, text=True, timeout=600, env=failing
        )
        assert pasted.returncode == 1, pasted.stderr
    records = sorted((runs["cand"] / "repro" / cell["cell_id"]).glob("*/cells/*.json"))
    assert len(records) == 2, records
    for path in records:
        again = json.loads(path.read_text())
        assert again["status"] == "failed" and "planted failure" in again["failure"]["message"]
    assert len({p.parent.parent for p in records}) == 2
