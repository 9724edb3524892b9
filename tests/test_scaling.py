"""The scaling gate on planted records: a case at two worlds on both pins, each pin's efficiency
(per-rank throughput at the larger world over the smaller's), candidate against baseline in
paired rounds; the verdicts' error rates by seeded simulation."""

from __future__ import annotations

import math
import random
from typing import Any

import pytest
import scipy.stats

from suite.judge.policy import load_policy
from suite.judge.scaling import scaling_cells, scaling_key
from suite.judge.sequential import Design
from tests.synthetic import Cell, _record

POLICY = load_policy(None, "distributed-finetune")
SMALL, LARGE = "fsdp2.d256.n1x2@cpu", "fsdp2.d256.n2x2@cpu"


def records(level: dict[str, float], rounds: int, seed: int, noise: float = 0.0) -> dict[str, Any]:
    """Each world's records: a step of LEVEL seconds, each round scaled by a random factor
    (shared by both worlds of a round, as one machine's state is) and its own noise."""
    rng = random.Random(seed)
    out: dict[str, list[dict[str, Any]]] = {SMALL: [], LARGE: []}
    for r in range(rounds):
        shared = math.exp(rng.gauss(0, 0.05))
        for cell_id, seconds in level.items():
            case = cell_id.split(".", 1)[1].rsplit("@", 1)[0]
            step = seconds * shared * math.exp(rng.gauss(0, noise))
            doc = _record(Cell(workload="fsdp2", case=case, level_s=step, spread=0.0), "R", r, r)
            out[cell_id].append(doc)
    return out


def judge(base: dict[str, Any], cand: dict[str, Any], rounds: int) -> dict[str, Any]:
    (cell,) = scaling_cells(POLICY, base, cand, Design().fixed(rounds), True)
    return dict(cell)


def test_the_world_token_keys_a_scaling_row() -> None:
    assert scaling_key("fsdp2.d256.n2x4@cuda") == ("fsdp2.d256@cuda", 8)
    assert scaling_key("collectives.all_reduce.1KiB.c10d.n1x2@cpu") == (
        "collectives.all_reduce.1KiB.c10d@cpu", 2
    )  # fmt: skip
    assert scaling_key("sdpa.causal.s256@cpu") is None


def test_a_candidate_that_scales_worse_fails_and_the_cell_shows_both_efficiencies() -> None:
    base = records({SMALL: 0.010, LARGE: 0.010}, 10, seed=1, noise=0.01)
    cand = records({SMALL: 0.010, LARGE: 0.0130}, 10, seed=2, noise=0.01)  # world 4: 30% slower
    cell = judge(base, cand, 10)
    assert cell["cell_id"] == "scaling.fsdp2.d256.n2x2-over-n1x2@cpu"
    assert cell["row_id"] == "fsdp2@cpu"
    (gate,) = cell["gates"]
    assert gate["gate"] == "scaling" and gate["verdict"] == "fail", gate["message"]
    assert gate["unit"] == "efficiency"
    # Same items per step at both worlds: the baseline keeps half its per-rank rate at world 4.
    assert gate["baseline"] == pytest.approx(0.5, rel=0.02)
    assert gate["candidate"] == pytest.approx(0.5 / 1.3, rel=0.02)
    assert gate["change"] == pytest.approx(1 / 1.3 - 1, abs=0.02)
    assert gate["message"].startswith("efficiency at n2x2 over n1x2: baseline 0.50, candidate 0.3")
    assert "worse beyond the threshold (±10.0%)" in gate["message"]


def test_a_slower_candidate_that_scales_alike_passes() -> None:
    """Both worlds 20% slower on the candidate: throughput regressed (its own gate says so),
    scaling did not."""
    base = records({SMALL: 0.010, LARGE: 0.012}, 10, seed=3, noise=0.01)
    cand = records({SMALL: 0.012, LARGE: 0.0144}, 10, seed=4, noise=0.01)
    (gate,) = judge(base, cand, 10)["gates"]
    assert gate["verdict"] == "pass", gate["message"]


def test_a_world_that_never_ran_on_a_side_is_untested_naming_it() -> None:
    base = records({SMALL: 0.010, LARGE: 0.010}, 6, seed=5)
    cand = records({SMALL: 0.010, LARGE: 0.010}, 6, seed=6)
    cand[LARGE] = [{**r, "status": "crashed"} for r in cand[LARGE]]
    (gate,) = judge(base, cand, 6)["gates"]
    assert gate["verdict"] == "untested"
    assert "none from candidate n2x2" in gate["message"]


def test_no_scaling_gate_in_the_policy_or_one_world_gives_no_cell() -> None:
    base = records({SMALL: 0.010, LARGE: 0.010}, 3, seed=7)
    one = {SMALL: base[SMALL]}
    assert scaling_cells(POLICY, one, one, Design().fixed(3), True) == []
    without = load_policy(None, "distributed-finetune")
    without.gates.pop("scaling")
    assert scaling_cells(without, base, base, Design().fixed(3), True) == []


def test_the_gate_fails_a_pin_that_scales_alike_at_most_at_its_error_rate() -> None:
    """Seeded simulation: both pins scale alike (log-normal noise per round), 12 rounds; the
    share of false fails stays within the one-sided t test's level (a binomial bound from
    scipy), and a true 25% efficiency fall is caught nearly always."""
    design = Design().fixed(12)
    false_fails = caught = 0
    trials = 300
    for seed in range(trials):
        base = records({SMALL: 0.010, LARGE: 0.011}, 12, seed=10_000 + seed, noise=0.03)
        same = records({SMALL: 0.010, LARGE: 0.011}, 12, seed=20_000 + seed, noise=0.03)
        worse = records({SMALL: 0.010, LARGE: 0.011 / 0.75}, 12, seed=30_000 + seed, noise=0.03)
        (alike,) = scaling_cells(POLICY, base, same, design, True)
        (fell,) = scaling_cells(POLICY, base, worse, design, True)
        false_fails += alike["gates"][0]["verdict"] == "fail"
        caught += fell["gates"][0]["verdict"] == "fail"
    bound = scipy.stats.binom.ppf(0.999, trials, design.fail_level)
    assert false_fails <= bound
    assert caught / trials > 0.95


def test_the_decision_and_its_comment_show_both_pins_efficiencies(tmp_path: Any) -> None:
    """An A/B of a case at two worlds: the decision gains the scaling cell in the case's row,
    and the Markdown report a table with the baseline's and the candidate's efficiency."""
    from suite.core.loaded import LoadedRun
    from suite.judge.decision import decision_of
    from suite.report.markdown import render_markdown
    from tests.synthetic import make_run

    def cells(slower: float) -> list[Cell]:
        return [Cell(workload="fsdp2", case="d256.n1x2", level_s=0.010),
                Cell(workload="fsdp2", case="d256.n2x2", level_s=0.010 * slower)]  # fmt: skip

    make_run(tmp_path / "b", cells(1.0), run_id="20261205T000000Z-00000b", rounds=8, seed=1)
    make_run(tmp_path / "c", cells(1.3), run_id="20261205T000001Z-00000c", rounds=8, seed=2)
    decision = decision_of(
        LoadedRun.load(tmp_path / "b", "baseline"), LoadedRun.load(tmp_path / "c", "candidate"),
        POLICY,
    )  # fmt: skip
    scaling = [c for c in decision["cells"] if c["cell_id"].startswith("scaling.")]
    assert [c["cell_id"] for c in scaling] == ["scaling.fsdp2.d256.n2x2-over-n1x2@cpu"]
    assert scaling[0]["gates"][0]["verdict"] == "fail"
    row = next(r for r in decision["rows"] if r["row_id"] == "fsdp2@cpu")
    assert row["decision"] != "adopt"
    text = render_markdown(decision)
    assert "### Scaling" in text
    line = next(x for x in text.splitlines() if x.startswith("| fsdp2\\.d256@cpu | n2x2 over"))
    assert line.startswith("| fsdp2\\.d256@cpu | n2x2 over n1x2 | 0.50 | 0.38 | -23.")
    assert line.endswith("% | fail |")
