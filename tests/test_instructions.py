"""The instructions gate: the replicate rule and the threshold by simulation with a seeded
generator, what it says when a side could not count, the functions that moved, and what is read
from a real callgrind profile (Valgrind on a plain Python, no torch: seconds, not minutes)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from suite.execute.counting import countable, per_function
from suite.judge.instructions import (
    ONE_COUNT_SHARE,
    REPLICATE_SPREAD,
    REPLICATES,
    instructions_gate,
    what_moved,
)
from suite.judge.policy import Gate

GATE = Gate(name="instructions", severity="soft", threshold=0.02)


def _count(per_step: float, capability: str = "AVX2", **extra: Any) -> dict[str, Any]:
    return {
        "status": "ok",
        "instructions": {"steps": 10, "warmup_calls": 6, "threads": 1, "capability": capability,
                         "total": round(per_step * 10), "per_step": per_step, **extra},
    }  # fmt: skip


def _sides(
    rng: np.random.Generator, level: float, change: float, jitter: float
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    base = [_count(level * (1 + rng.normal(0, jitter))) for _ in range(REPLICATES)]
    cand = [_count(level * (1 + change) * (1 + rng.normal(0, jitter))) for _ in range(REPLICATES)]
    return base, cand


@pytest.mark.parametrize(
    ("change", "jitter", "verdict"),
    [
        (0.0, 2e-4, "pass"),  # A/A: the replicate spread seen here (0.03% at most)
        (0.02 * 1.25, 2e-4, "fail"),  # +2.5% at a 2% threshold
        (0.05, 2e-4, "fail"),
        (-0.05, 2e-4, "improved"),
        (0.05, 0.02, "inconclusive"),  # replicates 2% apart: not a count to decide on
    ],
)
def test_the_rule_decides_every_simulated_cell(change: float, jitter: float, verdict: str) -> None:
    rng = np.random.default_rng(21)
    seen = []
    for _ in range(2000):
        base, cand = _sides(rng, 1.2e7, change, jitter)
        result = instructions_gate(GATE, base, cand)
        assert result is not None
        seen.append(result["verdict"])
    # Deterministic counts decide every cell: no false fail in 2000 A/As, no miss at +2.5% or +5%.
    if verdict != "inconclusive":
        assert {v: seen.count(v) for v in set(seen)} == {verdict: 2000}
        return
    # Counts 2% apart are no count: nearly all inconclusive. Two draws that land close by chance
    # decide, and then rarely wrongly (measured: 2 passes of a +5% change in 2000, 0.1%).
    assert seen.count("inconclusive") >= 0.95 * len(seen)
    assert seen.count("pass") <= 0.005 * len(seen) and "improved" not in seen


def test_a_count_that_does_not_reproduce_is_inconclusive_never_a_pass() -> None:
    base = [_count(1.0e7), _count(1.0e7 * (1 + 2 * REPLICATE_SPREAD))]
    cand = [_count(1.0e7), _count(1.0e7)]
    result = instructions_gate(GATE, base, cand)
    assert result is not None and result["verdict"] == "inconclusive"
    assert "count not reproducible" in result["message"] and result["undecided"] == "noise"


def test_a_side_that_could_not_count_leaves_the_gate_untested_with_the_reason() -> None:
    missing = [
        {"status": "skipped", "failure": {"message": "Valgrind is not here: install Valgrind"}}
    ] * REPLICATES
    result = instructions_gate(GATE, [_count(1e7), _count(1e7)], missing)
    assert result is not None and result["verdict"] == "untested"
    assert "install Valgrind" in result["message"]
    none = instructions_gate(GATE, [], [_count(1e7), _count(1e7)])
    assert none is not None and none["verdict"] == "untested"
    assert "baseline kept no count" in none["message"]
    assert instructions_gate(GATE, [], []) is None  # nobody counted: the gate does not apply
    other = instructions_gate(
        GATE, [_count(1e7, "AVX512"), _count(1e7, "AVX512")], [_count(1e7), _count(1e7)]
    )
    assert other is not None and other["verdict"] == "not-comparable"


def test_a_step_unsupported_on_both_pins_is_unsupported_and_on_one_untested() -> None:
    why = "FlexAttention does not support backward on CPU."
    unsupported = [{"status": "unsupported", "failure": {"message": why}}] * REPLICATES
    both = instructions_gate(GATE, unsupported, unsupported)
    assert both is not None and both["verdict"] == "unsupported"
    assert why in both["message"] and "both pins" in both["message"]
    # Only the candidate lost the step: that is no finding of both, and never a pass.
    one = instructions_gate(GATE, [_count(1e7), _count(1e7)], unsupported)
    assert one is not None and one["verdict"] == "untested" and why in one["message"]


def test_the_decision_summary_says_in_how_many_cells_instructions_decided() -> None:
    from suite.judge.rules import timing_lines

    def cell(verdict: str) -> dict[str, Any]:
        return {"gates": [{"gate": "instructions", "verdict": verdict}]}

    cells = [cell("pass"), cell("pass"), cell("improved"), cell("unsupported")]
    (line,) = timing_lines(cells)
    assert line.startswith("instructions decided in 3 of 4 cells")
    assert "1 unsupported" in line


def test_what_moved_names_the_planted_function_first(tmp_path: Path) -> None:
    def side(name: str, functions: dict[str, int], per_step: float) -> list[dict[str, Any]]:
        listing = "".join(f"{total}\t{fn}\n" for fn, total in functions.items())
        (tmp_path / f"{name}.functions.tsv").write_text(listing)
        record = _count(per_step, functions=f"{name}.functions.tsv")
        return [record, {**record}]

    common = {"PyEval_EvalFrameDefault": 400_000, "at::native::add_kernel": 50_000}
    base = side("base", common, 4.5e4)
    planted = {**common, "mkl_blas_avx2_sgemm_kernel_0_b0": 3_000_000}
    cand = side("cand", {**planted, "PyEval_EvalFrameDefault": 402_000}, 3.5e5)
    result = instructions_gate(GATE, base, cand, dirs=(tmp_path, tmp_path))
    assert result is not None and result["verdict"] == "fail"
    moved = result["moved"]
    assert moved[0]["function"] == "mkl_blas_avx2_sgemm_kernel_0_b0"
    assert moved[0]["baseline"] == 0 and moved[0]["change"] == 300_000  # per step: 10 counted
    assert [m["function"] for m in moved] == [
        "mkl_blas_avx2_sgemm_kernel_0_b0", "PyEval_EvalFrameDefault"
    ]  # fmt: skip
    assert what_moved(base, cand, (tmp_path, tmp_path / "gone")) == []
    assert what_moved(base, cand) == []  # folders not known: nothing to read


def test_one_rank_cpu_cells_are_counted_compiled_or_not_but_no_compile_sweeps() -> None:
    from suite.core.spec import CellSpec

    def spec(**kw: Any) -> CellSpec:
        base = {
            "workload": "sdpa",
            "ref": "sdpa",
            "params": (),
            "backend": "cpu",
            "profile": "smoke",
        }
        return CellSpec(**{**base, **kw})  # type: ignore[arg-type]

    assert countable(spec())
    assert not countable(spec(backend="cuda"))
    assert not countable(spec(workload="compile", ref="compile"))
    assert not countable(spec(workload="export", ref="export"))
    # A compiled step compiles in its cold call, outside the count: it is counted.
    assert countable(
        spec(workload="flex_attention", ref="flex_attention", params=(("mode", "compiled"),))
    )
    assert not countable(spec(ranks=2))


def test_a_cells_counting_processes_share_its_inductor_cache_and_no_other_cell_does(
    tmp_path: Path,
) -> None:
    """The second count of a compiled cell loads the graph the first compiled; a cell's count
    never starts from another cell's compiled graphs."""
    from suite.core.spec import CellSpec
    from suite.execute.counting import Counter

    def spec(mode: str) -> CellSpec:
        return CellSpec(
            workload="flex_attention", ref="flex_attention", backend="cpu", profile="smoke",
            params=(("mask", "causal"), ("mode", mode)),
        )  # fmt: skip

    counter = Counter(tmp_path, sys.executable, {})
    compiled, eager = spec("compiled"), spec("eager")
    assert counter.inductor_cache(compiled) == counter.inductor_cache(spec("compiled"))
    assert counter.inductor_cache(compiled) != counter.inductor_cache(eager)
    cache = counter.inductor_cache(compiled)
    cache.mkdir(parents=True)
    (cache / "graph").write_text("compiled", encoding="utf-8")
    counter.close()
    assert not cache.exists()  # the run folder keeps the counts, not the compiled graphs


@pytest.mark.skipif(
    shutil.which("valgrind") is None, reason="needs valgrind (apt-get install valgrind)"
)
def test_a_real_callgrind_profile_reads_as_totals_and_per_function_counts(tmp_path: Path) -> None:
    profile = tmp_path / "callgrind.out"
    subprocess.run(
        ["valgrind", "--tool=callgrind", "--dump-instr=no", f"--callgrind-out-file={profile}",
         sys.executable, "-S", "-c", "sum(i * i for i in range(20000))"],
        capture_output=True, check=True, timeout=300,
    )  # fmt: skip
    from suite.execute.counting import _TOTALS

    found = _TOTALS.search(profile.read_bytes())
    assert found is not None and int(found[1]) > 1_000_000
    functions = per_function(profile)
    assert functions and all(isinstance(v, int) and v > 0 for v in functions.values())
    assert sum(functions.values()) <= int(found[1])
    assert not any(name.startswith("???:") or name.endswith("]") for name in functions)


@pytest.mark.parametrize(
    ("change", "verdict"),
    [
        (0.0, "pass"),
        (0.02 * ONE_COUNT_SHARE * 0.9, "pass"),  # within what one count a side settles
        (-0.02 * ONE_COUNT_SHARE * 0.9, "pass"),
        (0.02 * ONE_COUNT_SHARE * 1.1, "inconclusive"),  # near the threshold: count again
        (0.05, "inconclusive"),  # a fail stands only on REPLICATES counts a side
        (-0.05, "inconclusive"),
    ],
)
def test_one_count_a_side_settles_only_a_change_far_from_the_threshold(
    change: float, verdict: str
) -> None:
    result = instructions_gate(GATE, [_count(1.2e7)], [_count(1.2e7 * (1 + change))])
    assert result is not None and result["verdict"] == verdict, result
    if verdict == "inconclusive":
        assert f"needs {REPLICATES} counts a side" in result["message"]
        # Counted again, the same figures decide.
        again = instructions_gate(GATE, [_count(1.2e7)] * 2, [_count(1.2e7 * (1 + change))] * 2)
        expected = "pass" if abs(change) <= 0.02 else "fail" if change > 0 else "improved"
        assert again is not None and again["verdict"] == expected


def test_a_failed_count_beside_good_ones_is_not_another_kernel() -> None:
    lost = {"status": "failed", "failure": {"message": "the fork server was lost"}}
    result = instructions_gate(GATE, [_count(1e7), _count(1e7)], [_count(1.05e7), lost])
    assert result is not None and result["verdict"] == "inconclusive", result["message"]
    assert "needs 2 counts a side" in result["message"]
