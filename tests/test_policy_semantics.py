"""A schema-valid policy can still be wrong in what its gates need: it is refused when it
loads, naming the file and the field, before any cell runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from suite.core.errors import InputError
from suite.judge.metric_gates import METRIC_GATES
from suite.judge.policy import GATE_NEEDS, Gate, default_policy_text, load_policy
from tests.helpers import cli, planted


def _policy(tmp_path: Path, edit: Any) -> Path:
    doc = yaml.safe_load(default_policy_text())
    edit(doc["profiles"]["research"])
    path = tmp_path / "policy.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


THRESHOLD_GATES = [g for g, needs in GATE_NEEDS.items() if "threshold" in needs]


def test_the_threshold_gates_are_read_from_the_gate_registry() -> None:
    assert {"latency_p50", "peak_memory", "instructions"} <= set(THRESHOLD_GATES)
    assert "status" not in THRESHOLD_GATES


@pytest.mark.parametrize("gate", THRESHOLD_GATES)
def test_a_gate_without_its_threshold_is_refused_at_load(tmp_path: Path, gate: str) -> None:
    path = _policy(tmp_path, lambda p: p["gates"][gate].pop("threshold"))
    with pytest.raises(InputError) as info:
        load_policy(path, "research")
    assert (info.value.file, info.value.path) == (
        str(path),
        f"$.profiles.research.gates.{gate}.threshold",
    )


def test_the_ab_that_would_have_crashed_stops_before_any_cell(tmp_path: Path) -> None:
    path = _policy(tmp_path, lambda p: p["gates"]["latency_p50"].pop("threshold"))
    out = tmp_path / "ab"
    code, _, stderr = cli(
        "ab", "--candidate", "current", "--workload", planted("Quick"), "--cell", "quick.8@cpu",
        "--policy", str(path), "--profile", "research", "--rounds", "1", "--out", str(out),
    )  # fmt: skip
    assert code == 2, stderr
    assert f"{path}::$.profiles.research.gates.latency_p50.threshold:" in stderr
    assert not (out / "baseline" / "cells").exists()


def test_unknown_gates_stray_fields_and_rules_naming_absent_gates(tmp_path: Path) -> None:
    cases = {
        "$.profiles.research.gates.latency_p99": lambda p: p["gates"].update(
            latency_p99={"severity": "soft", "threshold": 0.1}
        ),
        "$.profiles.research.gates.peak_memory.must_not_grow": lambda p: p["gates"][
            "peak_memory"
        ].update(must_not_grow=True),
        "$.profiles.research.rules[0].gate": lambda p: p.setdefault("rules", []).insert(
            0, {"decision": "defer", "verdicts": ["fail"], "gate": "no_such_gate"}
        ),
    }
    for where, edit in cases.items():
        with pytest.raises(InputError) as info:
            load_policy(_policy(tmp_path, edit), "research")
        assert info.value.path == where


def test_every_gate_the_policy_knows_is_judged_and_no_other() -> None:
    from suite.judge.registry import REGISTRY

    assert list(REGISTRY) != [] and set(GATE_NEEDS) == set(REGISTRY)


def _counts(base: int, cand: int) -> list[dict[str, Any]]:
    def record(n: int) -> dict[str, Any]:
        return {"metrics": {"graph_breaks": {"value": n}, "graph_break_reasons": {"value": ""}}}

    return [record(base)], [record(cand)]  # type: ignore[return-value]


def test_must_not_grow_decides_whether_growth_fails() -> None:
    base, cand = _counts(1, 3)  # type: ignore[misc]
    strict = METRIC_GATES["graph_breaks"](
        Gate("graph_breaks", "soft", must_not_grow=True), base, cand
    )
    loose = METRIC_GATES["graph_breaks"](
        Gate("graph_breaks", "soft", must_not_grow=False), base, cand
    )
    assert strict is not None and strict["verdict"] == "fail"
    assert loose is not None and loose["verdict"] == "pass" and "allowed" in loose["message"]
