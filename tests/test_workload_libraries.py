"""The libraries a workload imports beside torch are compared between the sides: a different
version (a changed workload) is named in the decision, and a profile's same_packages defers on
it; what moves with torch (its own requirements) is never listed."""

from __future__ import annotations

import json
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import Any

import pytest
import yaml

from suite.core.loaded import LoadedRun
from suite.judge.packages import held_by_policy, package_differences
from suite.judge.policy import default_policy_text
from tests.helpers import cli

TEAM = str(Path(__file__).parent / "plugins" / "team_lib.py") + ":TeamLib"


def _run(requires: list[str], results: dict[str, list[dict[str, Any]]]) -> LoadedRun:
    run: Any = {"environment": {"torch_requires": requires}}
    return LoadedRun("side", Path("."), run, results)  # type: ignore[arg-type]


def test_a_library_at_another_version_is_listed_and_what_moves_with_torch_is_not() -> None:
    base = _run(
        ["sympy"],
        {
            "a@cpu": [{"imports": {"transformers": "4.57.1", "sympy": "1.13", "numpy": "2.1"}}],
            "b@cpu": [{"imports": {"transformers": "4.57.1"}}],
            "old@cpu": [{}],  # a record from before libraries were recorded: not compared
        },
    )
    cand = _run(
        ["sympy"],
        {
            "a@cpu": [{"imports": {"transformers": "4.58.0", "sympy": "1.14", "numpy": "2.1"}}],
            "b@cpu": [{"imports": {"transformers": "4.58.0", "onnxruntime": "1.20.1"}}],
            "old@cpu": [{"imports": {"transformers": "9"}}],
        },
    )
    diffs = package_differences(base, cand)
    assert diffs == [
        {"name": "onnxruntime", "baseline": None, "candidate": "1.20.1", "cells": 1},
        {"name": "transformers", "baseline": "4.57.1", "candidate": "4.58.0", "cells": 2},
    ]
    assert held_by_policy(diffs, ["transformers"]) == ["transformers"]
    assert held_by_policy(diffs, ["*"]) == ["onnxruntime", "transformers"]
    assert held_by_policy(diffs, ["numpy"]) == []


def _venv(path: Path, version: str) -> str:
    """A venv that sees this interpreter's packages and holds tm-team-lib at VERSION, installed
    as a real distribution (dist-info with its top-level module)."""
    subprocess.run(
        [sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(path)],
        check=True,
    )
    site = Path(sysconfig.get_path("purelib", vars={"base": str(path), "platbase": str(path)}))
    (site / "tm_team_lib").mkdir()
    (site / "tm_team_lib" / "__init__.py").write_text("SCALE = 1\n")
    info = site / f"tm_team_lib-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: tm-team-lib\nVersion: {version}\n"
    )
    (info / "top_level.txt").write_text("tm_team_lib\n")
    return str(path / "bin" / "python")


@pytest.mark.xdist_group("ab")
def test_a_team_library_at_another_version_is_flagged_and_can_defer(tmp_path: Path) -> None:
    out = tmp_path / "ab"
    cli(
        "ab", "--baseline", _venv(tmp_path / "base", "1.0"),
        "--candidate", _venv(tmp_path / "cand", "2.0"), "--workload", TEAM,
        "--rounds", "1", "--no-count", "--out", str(out),
    )  # fmt: skip
    decision = json.loads((out / "decision.json").read_text())
    assert {"name": "tm-team-lib", "baseline": "1.0", "candidate": "2.0", "cells": 1} in (
        decision["comparable"]["packages"]
    )
    (line,) = [r for r in decision["reasons"] if "libraries the workloads imported" in r]
    listed = line.split("not only the pin: ")[1]
    assert listed == "tm-team-lib 1.0 → 2.0 (1 cell)"  # nothing that moves with torch
    # The same records under a profile that holds the team's library to one version.
    policy = yaml.safe_load(default_policy_text())
    policy["profiles"]["research"]["same_packages"] = ["tm-team-*"]
    path = tmp_path / "policy.yaml"
    path.write_text(yaml.safe_dump(policy))
    again = tmp_path / "again.json"
    code, _, stderr = cli(
        "compare", str(out / "baseline"), str(out / "candidate"), "--policy", str(path),
        "--format", "json", "--out", str(again),
    )  # fmt: skip
    held = json.loads(again.read_text())
    assert (code, held["decision"]) == (5, "defer"), stderr
    # First, after what the run could not do as asked (a round left out as disturbed on a
    # busy runner says so before anything that follows from it).
    held_reasons = [r for r in held["reasons"] if not r.startswith("--rounds ")]
    assert held_reasons[0] == (
        "tm-team-lib must be the same on both sides (the profile's same_packages)"
    )


def test_the_joined_decision_of_many_jobs_adds_up_their_library_differences() -> None:
    from suite.flows.aggregate import _packages

    def job(*found: tuple[str, str | None, str | None, int]) -> Any:
        packages = [{"name": n, "baseline": b, "candidate": c, "cells": k} for n, b, c, k in found]
        return {"comparable": {"ok": True, "differences": [], "packages": packages}}

    joined = _packages(
        [job(("transformers", "4.57.1", "4.58.0", 2)), job(("transformers", "4.57.1", "4.58.0", 3),
         ("accelerate", None, "1.0", 1)), {"comparable": {"ok": True, "differences": []}}]
    )  # fmt: skip
    assert joined == [
        {"name": "accelerate", "baseline": None, "candidate": "1.0", "cells": 1},
        {"name": "transformers", "baseline": "4.57.1", "candidate": "4.58.0", "cells": 5},
    ]


def test_the_harness_itself_is_not_a_library_the_workload_imported() -> None:
    # Installed in the baseline's interpreter (pip install -e .) and passed by path to the
    # candidate's venv: were it counted, every A/B would name it a changed workload.
    from importlib.metadata import packages_distributions

    assert "torch-matrix" in packages_distributions().get("suite", []), "install it: pip -e ."
    code = (
        "import json, sys; before = set(sys.modules); import yaml, suite.workloads.sdpa; "
        "from suite.worker.envinfo import imported_distributions; "
        "print(json.dumps(imported_distributions(before)))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    assert "pyyaml" in found  # a library it did import is listed
    assert "torch-matrix" not in found
