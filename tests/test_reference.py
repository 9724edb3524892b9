"""The README's reference section is generated from the commands, the exit codes, action.yml
and the reusable workflow: the README holds exactly that output, and what is added to a
source shows up in it without a hand-written line."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import click
import pytest

from suite.cli.main import main as cli
from suite.cli.reference import (
    ACTION,
    BEGIN,
    END,
    ROOT,
    WORKFLOW,
    reference,
    replace_block,
)
from tests.helpers import REPO


def test_the_readme_holds_the_generated_reference() -> None:
    readme = (ROOT / "README.md").read_text("utf-8")
    assert replace_block(readme, reference()) == readme, (
        "README.md's reference is stale: run python -m suite.cli.reference --write"
    )


def test_every_option_of_every_command_is_in_the_reference() -> None:
    text = reference()
    for name, command in cli.commands.items():
        assert f"**`torch-matrix {name} " in text
        for param in command.params:
            if isinstance(param, click.Option):
                assert f"`{param.opts[0]}`" in text, (name, param.opts)
    assert "| `130` | interrupted |" in text


def test_an_option_added_at_run_time_shows_up_with_its_help_and_default() -> None:
    @click.command(help="A command only this test has.")
    @click.option("--widgets", type=int, default=3, show_default=True, help="How many widgets.")
    def fake(widgets: int) -> None:
        del widgets

    group = click.Group(commands={**cli.commands, "fake": fake})
    text = reference(group)
    assert "**`torch-matrix fake [OPTIONS]`** — A command only this test has." in text
    assert "| `--widgets` INTEGER | `3` | How many widgets. |" in text
    assert "**`torch-matrix fake" not in reference()


def test_an_action_input_and_a_workflow_output_added_show_up(tmp_path: Path) -> None:
    for path in (ACTION, WORKFLOW):
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / path, tmp_path / path)
    action = tmp_path / ACTION
    action.write_text(
        action.read_text("utf-8").replace(
            "inputs:\n",
            "inputs:\n  gizmo:\n    description: A gizmo | with a pipe.\n    default: two\n",
            1,
        ),
        encoding="utf-8",
    )
    workflow = tmp_path / WORKFLOW
    workflow.write_text(
        workflow.read_text("utf-8").replace(
            "    outputs:\n",
            "    outputs:\n      gizmo-count:\n        description: How many gizmos.\n"
            "        value: ${{ jobs.plan.outputs.changed }}\n",
            1,
        ),
        encoding="utf-8",
    )
    text = reference(root=tmp_path)
    assert "| `gizmo` | `two` | A gizmo \\| with a pipe. |" in text
    assert "| `gizmo-count` | How many gizmos. |" in text


def test_a_readme_without_its_markers_is_an_error_not_a_rewrite() -> None:
    with pytest.raises(ValueError, match="markers"):
        replace_block("# no markers here\n", reference())
    with pytest.raises(ValueError, match="markers"):
        replace_block(f"{BEGIN}\n{END}\n{BEGIN}\n{END}\n", reference())


def test_the_readme_gate_table_names_every_gate_the_policy_accepts() -> None:
    from suite.judge.policy import GATE_NEEDS

    readme = (REPO / "README.md").read_text()
    table = readme.split("| gate | what it compares |", 1)[1].split("\n\n", 1)[0]
    named = {m for m in re.findall(r"^\| `([a-z_0-9]+)` \|", table, re.M)}
    assert named == set(GATE_NEEDS)
    for gate, needs in GATE_NEEDS.items():  # a field a gate needs is named in its row
        row = next(line for line in table.splitlines() if line.startswith(f"| `{gate}` |"))
        assert all(f"`{field}`" in row for field in needs), row


def test_the_readme_example_policy_loads(tmp_path: Path) -> None:
    from suite.judge.policy import load_policy

    readme = (REPO / "README.md").read_text()
    block = readme.split("A policy of a team whose fleet is CUDA", 1)[1]
    text = block.split("```yaml\n", 1)[1].split("\n```", 1)[0]
    path = tmp_path / "torch-matrix-policy.yml"
    path.write_text(text)
    policy = load_policy(path, None)
    assert policy.profile == "serving" and policy.fleet_backends == ("cuda",)
    assert {"fallback", "rollback", "drift"} <= set(policy.gates)


def test_the_reference_names_no_path_of_the_machine_that_wrote_it() -> None:
    import sys

    text = reference()
    assert sys.executable not in text and str(Path.home()) + "/" not in text
    assert "| `--python` TEXT | this interpreter |" in text
