"""What was never checked is never claimed: a side that lacks a workload's package is that
side's environment, not a torch regression; and an A/B whose gates were decided in no cell does
not adopt (exit 0), and lists every undecided cell with why."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
import yaml

from suite.judge.missing import missing_gates
from suite.judge.policy import default_policy_text, load_policy
from suite.worker.cell import _record_failure, lacks_package
from tests.helpers import cli, planted

TEAM = str(Path(__file__).parent / "plugins" / "team_dep.py") + ":TeamDep"


def _failure(code: str, filename: str) -> dict[str, object]:
    doc: dict[str, object] = {}
    try:
        exec(compile(code, filename, "exec"), {})
    except BaseException as exc:
        _record_failure(doc, exc)  # type: ignore[arg-type]
    return doc


def test_a_package_the_workload_imports_is_the_sides_not_torchs(tmp_path: Path) -> None:
    doc = _failure("import tm_absent_team_package.sub", str(tmp_path / "team_models.py"))
    assert (doc["status"], doc["failure"]["mode"]) == ("skipped", "dependency")  # type: ignore[index]
    message = doc["failure"]["message"]  # type: ignore[index]
    assert "lacks the package 'tm_absent_team_package'" in message and "--with" in message


def test_a_torch_that_lacks_its_own_dependency_still_fails() -> None:
    import torch

    inside = os.path.join(os.path.dirname(torch.__file__), "_planted_import.py")
    doc = _failure("import tm_absent_torch_dependency", inside)
    assert doc["status"] == "failed"
    assert lacks_package(ModuleNotFoundError("x", name="torch.nn.absent")) is None


def _venv(path: Path, module: str | None) -> str:
    """A venv that sees this interpreter's packages, holding the team's module or not."""
    subprocess.run(
        [sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(path)],
        check=True,
    )
    site = Path(sysconfig.get_path("purelib", vars={"base": str(path), "platbase": str(path)}))
    if module is not None:
        (site / "tm_team_dep.py").write_text(module)
    return str(path / "bin" / "python")


@pytest.mark.xdist_group("ab")
def test_a_candidate_without_the_teams_package_defers_naming_it(tmp_path: Path) -> None:
    base = _venv(tmp_path / "base", "SCALE = 2\n")
    cand = _venv(tmp_path / "cand", None)
    out = tmp_path / "ab"
    code, _, stderr = cli(
        "ab", "--baseline", base, "--candidate", cand, "--workload", TEAM,
        "--rounds", "1", "--out", str(out),
    )  # fmt: skip
    decision = json.loads((out / "decision.json").read_text())
    assert (code, decision["decision"]) == (5, "defer"), stderr
    (cell,) = [c for c in decision["cells"] if c["cell_id"].endswith("@cpu")]
    assert (cell["baseline_status"], cell["candidate_status"]) == ("ok", "skipped")
    status = next(g for g in cell["gates"] if g["gate"] == "status")
    assert status["verdict"] == "untested"
    assert "skipped on the candidate side" in status["message"]
    assert "lacks the package 'tm_team_dep'" in status["message"]
    assert not any(g["verdict"] in ("fail", "new-failure") for g in cell["gates"])
    markdown = (out / "decision.md").read_text()
    assert "tm\\_team\\_dep" in markdown


@pytest.mark.xdist_group("ab")
def test_an_ab_whose_timing_was_decided_nowhere_does_not_adopt(tmp_path: Path) -> None:
    """One round per side and no counting: neither the instruction count nor the latency of
    any cell decided, so the research profile's CPU-cost verdict of record is missing, and an
    A/B that would otherwise adopt defers, naming the gate and each undecided cell."""
    out = tmp_path / "ab"
    code, _, stderr = cli(
        "ab", "--candidate", "current", "--workload", planted("Quick"), "--cell", "quick.8@cpu",
        "--cell", "quick.16@cpu", "--rounds", "1", "--no-count", "--out", str(out),
    )  # fmt: skip
    decision = json.loads((out / "decision.json").read_text())
    assert (code, decision["decision"]) == (5, "defer"), stderr
    missing = [r for r in decision["reasons"] if "was decided in no cell" in r]
    assert any(r.startswith("instructions ") for r in missing), decision["reasons"]
    # The wall-clock gate the budget could not decide is reported, and does not hold it.
    assert not any(r.startswith("latency_p50 ") for r in missing), decision["reasons"]
    assert all(g["verdict"] != "fail" for c in decision["cells"] for g in c["gates"])
    markdown = (out / "decision.md").read_text()
    for cell in [c for c in decision["cells"] if c["workload"] != "rollback"]:
        assert (
            f"- {cell['cell_id'].replace('_', chr(92) + '_').replace('.', chr(92) + '.')}: "
            in markdown
        )


def test_a_gate_the_profile_lets_be_missing_does_not_hold_an_adopt(tmp_path: Path) -> None:
    policy_text = tmp_path / "p.yaml"
    doc = yaml.safe_load(default_policy_text())
    gates = doc["profiles"]["research"]["gates"]
    gates["latency_p50"].pop("may_be_missing")  # the mechanism, on a profile that needs p50

    def cell(verdicts: dict[str, str]) -> dict[str, object]:
        return {
            "cell_id": "c@cpu", "baseline_status": "ok", "candidate_status": "ok",
            "gates": [{"gate": g, "verdict": v, "message": f"{g} said {v}"} for g, v in verdicts.items()],
        }  # fmt: skip

    undecided = cell({"latency_p50": "untested", "instructions": "pass", "status": "pass"})
    policy_text.write_text(yaml.safe_dump(doc))
    strict = load_policy(policy_text, "research")
    (line,) = missing_gates(strict, [undecided])  # type: ignore[list-item]
    assert line.startswith("latency_p50 was decided in no cell (1 undecided)")
    assert "c@cpu: untested — latency_p50 said untested" in line
    # Decided somewhere, open elsewhere: what it showed stands.
    decided = cell({"latency_p50": "pass", "status": "pass"})
    assert missing_gates(strict, [undecided, decided]) == []  # type: ignore[list-item]
    # Skipped on both sides (a backend absent here): nothing to judge, nothing missing.
    absent = {**undecided, "baseline_status": "skipped", "candidate_status": "skipped"}
    assert missing_gates(strict, [absent]) == []  # type: ignore[list-item]
    gates["latency_p50"]["may_be_missing"] = ["instructions"]
    policy_text.write_text(yaml.safe_dump(doc))
    stands_in = load_policy(policy_text, "research")
    assert missing_gates(stands_in, [undecided]) == []  # type: ignore[list-item]
    no_count = cell({"latency_p50": "untested", "instructions": "untested"})
    # Neither decided: both are missing (the count is the research profile's CPU cost).
    lines = missing_gates(stands_in, [no_count])  # type: ignore[list-item]
    assert [line.split()[0] for line in lines] == ["latency_p50", "instructions"]
    gates["latency_p50"]["may_be_missing"] = True
    policy_text.write_text(yaml.safe_dump(doc))
    (line,) = missing_gates(load_policy(policy_text, "research"), [no_count])  # type: ignore[list-item]
    assert line.startswith("instructions was decided in no cell")
    gates["instructions"]["may_be_missing"] = True
    policy_text.write_text(yaml.safe_dump(doc))
    assert missing_gates(load_policy(policy_text, "research"), [no_count]) == []  # type: ignore[list-item]


def test_the_decision_says_which_undecided_gates_the_profile_let_be_missing() -> None:
    from suite.judge.missing import excused_gates

    research = load_policy(None, "research")

    def cell(cell_id: str, verdicts: dict[str, str], status: str = "ok") -> dict[str, object]:
        return {
            "cell_id": cell_id, "baseline_status": status, "candidate_status": status,
            "gates": [{"gate": g, "verdict": v, "message": ""} for g, v in verdicts.items()],
        }  # fmt: skip

    cells = [
        cell("a@cpu", {"latency_p50": "inconclusive", "instructions": "pass"}),
        cell("b@cpu", {"latency_p50": "untested", "instructions": "pass"}),
        cell("c@cpu", {"latency_p50": "pass", "instructions": "untested"}),  # p50 stands in
        cell("d@cpu", {"latency_p50": "fail", "instructions": "pass"}),  # decided: not excused
        cell("e@cuda", {"latency_p50": "untested"}, status="skipped"),  # absent: nothing
    ]
    lines = excused_gates(research, cells)  # type: ignore[arg-type]
    assert lines == [
        "latency_p50 undecided in 2 cells, which the research profile lets be missing: it does "
        "not hold the decision",
        "instructions undecided in 1 cell, which the research profile lets be missing where "
        "latency_p50 decided: it does not hold the decision",
    ]
    assert missing_gates(research, cells) == []  # type: ignore[arg-type]
