"""Op-level trace diff: self times from a hand-built trace, a planted slowdown between two
real torch.profiler traces, unreadable traces as ValueErrors, and the escaped Markdown table.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from suite.report.escape import md
from suite.report.opdiff import OpTotals, op_diff, op_table, render_op_diff
from suite.worker.context import TRACE_STEPS, write_trace


def _x(
    name: str, ts: float, dur: float, cat: str = "cpu_op", tid: Any = 1, pid: Any = 10
) -> dict[str, Any]:
    return {
        "ph": "X",
        "cat": cat,
        "name": name,
        "pid": pid,
        "tid": tid,
        "ts": ts,
        "dur": dur,
        "args": {},
    }


def _write(path: Path, events: list[dict[str, Any]]) -> Path:
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events}), encoding="utf-8")
    return path


# One thread of nested ops under an annotation, a second thread whose op overlaps the first
# thread's in time, and a device stream; the self times below are worked out by hand.
HAND_TRACE = [
    {"ph": "M", "name": "process_name", "pid": 10, "tid": 0, "args": {"name": "python"}},
    _x("step", 0, 200, cat="user_annotation"),
    _x("aten::linear", 10, 100),
    _x("aten::t", 15, 10),
    _x("aten::addmm", 30, 60),
    _x("aten::copy_", 40, 15),
    _x("torch/nn/functional.py(1): helper", 60, 8, cat="python_function"),
    _x("cudaLaunchKernel", 75, 5, cat="cuda_runtime"),
    # Starts exactly where aten::linear ends: a sibling, not a child.
    _x("aten::t", 110, 4),
    _x("triton_poi_fused_add_0", 170, 6),
    # Exported times are rounded, so a child can overhang its parent by a nanosecond.
    _x("aten::contiguous", 300, 10),
    _x("aten::clone", 300.001, 10.001),
    _x("aten::mul", 12, 50, tid=2),
    _x("gemm_kernel", 40, 25, cat="kernel", pid=0, tid=7),
    _x("gemm_kernel", 70, 25, cat="kernel", pid=0, tid=7),
    # An annotation on the stream spans the kernels; a kernel still counts whole.
    _x("step", 40, 60, cat="gpu_user_annotation", pid=0, tid=7),
    _x("triton_poi_fused_add_0", 175, 3, cat="kernel", pid=0, tid=7),
    {"ph": "s", "id": 1, "pid": 10, "tid": 1, "ts": 75, "cat": "ac2g", "name": "ac2g"},
    {"ph": "i", "s": "g", "name": "Record Window End", "pid": "", "tid": "", "ts": 400},
]


def test_op_table_sums_self_time_and_calls_per_op(tmp_path: Path) -> None:
    table = op_table(_write(tmp_path / "trace.json", HAND_TRACE))

    expected = {
        ("cpu_op", "aten::linear"): (100 - 10 - 60, 1),
        ("cpu_op", "aten::t"): (10 + 4, 2),
        ("cpu_op", "aten::addmm"): (60 - 15 - 8 - 5, 1),
        ("cpu_op", "aten::copy_"): (15, 1),
        ("cpu_op", "aten::mul"): (50, 1),
        ("cpu_op", "triton_poi_fused_add_0"): (6, 1),
        ("cpu_op", "aten::contiguous"): (0, 1),
        ("cpu_op", "aten::clone"): (10.001, 1),
        ("kernel", "gemm_kernel"): (50, 2),
        ("kernel", "triton_poi_fused_add_0"): (3, 1),
    }
    assert set(table) == set(expected)
    for key, (self_us, calls) in expected.items():
        assert table[key] == OpTotals(pytest.approx(self_us), calls, key[0]), key


def test_op_diff_ranks_by_absolute_change_with_ties_by_name(tmp_path: Path) -> None:
    baseline = _write(
        tmp_path / "b.json",
        [_x("aten::a", 0, 10.04), _x("aten::b", 20, 5), _x("aten::same", 30, 7)],
    )
    candidate = _write(
        tmp_path / "c.json",
        [
            _x("aten::c", 0, 5),
            _x("aten::a", 10, 7.5),
            _x("aten::a", 20, 7.5),
            _x("aten::same", 30, 7),
            _x("alpha_kernel", 0, 5, cat="kernel", pid=0, tid=7),
        ],
    )

    rows = op_diff(baseline, candidate)

    # Four changes of 5 µs: name order, whatever the kind.
    assert rows == [
        {
            "op": "alpha_kernel",
            "kind": "kernel",
            "baseline_us": 0.0,
            "candidate_us": 5.0,
            "change_us": 5.0,
            "baseline_calls": 0,
            "candidate_calls": 1,
        },
        {
            "op": "aten::a",
            "kind": "cpu_op",
            "baseline_us": 10.0,
            "candidate_us": 15.0,
            "change_us": 5.0,
            "baseline_calls": 1,
            "candidate_calls": 2,
        },
        {
            "op": "aten::b",
            "kind": "cpu_op",
            "baseline_us": 5.0,
            "candidate_us": 0.0,
            "change_us": -5.0,
            "baseline_calls": 1,
            "candidate_calls": 0,
        },
        {
            "op": "aten::c",
            "kind": "cpu_op",
            "baseline_us": 0.0,
            "candidate_us": 5.0,
            "change_us": 5.0,
            "baseline_calls": 0,
            "candidate_calls": 1,
        },
    ]
    assert [row["op"] for row in op_diff(baseline, candidate, top=2)] == ["alpha_kernel", "aten::a"]
    assert op_diff(baseline, baseline) == []


def _profiled(step: Callable[[], object], path: Path) -> Path:
    """A trace of one step, written by the worker's own trace writer."""
    # Outside the trace: the first call of an op pays one-time setup that is not the op's.
    step()
    backend = SimpleNamespace(device_type="cpu", sync=lambda: None)
    write_trace(SimpleNamespace(step=step, backend=backend), path)
    return path


def test_op_diff_finds_the_ops_planted_in_a_real_profiler_trace(tmp_path: Path) -> None:
    torch.manual_seed(0)
    a, b = torch.randn(256, 256), torch.randn(256, 256)
    big, long = torch.randn(1024, 1024), torch.randn(1 << 20)

    def baseline_step() -> None:
        a @ b

    def candidate_step() -> None:
        a @ b
        for _ in range(3):
            torch.mm(big, big)
        for _ in range(5):
            torch.cumsum(long, 0)

    rows = op_diff(
        _profiled(baseline_step, tmp_path / "baseline.json"),
        _profiled(candidate_step, tmp_path / "candidate.json"),
    )

    # Three 1024-wide matmuls outweigh five cumsums of a million floats many times over.
    first = rows[0]
    assert (first["op"], first["kind"]) == ("aten::mm", "cpu_op")
    assert first["change_us"] > 0
    assert (first["baseline_calls"], first["candidate_calls"]) == (TRACE_STEPS, 4 * TRACE_STEPS)
    cumsum = next(row for row in rows if row["op"] == "aten::cumsum")
    assert cumsum["baseline_us"] == 0.0 and cumsum["baseline_calls"] == 0
    assert cumsum["change_us"] > 0 and cumsum["candidate_calls"] == 5 * TRACE_STEPS


@pytest.mark.parametrize(
    ("content", "why"),
    [
        (None, "missing"),
        (b"{not json", "cannot read"),
        (b"\xff\xfe\x00garbage", "cannot read"),
        (b"[]", "traceEvents"),
        (b'{"traceEvents": {"ph": "X"}}', "traceEvents"),
        (b'{"traceEvents": [42]}', "traceEvents[0]"),
        (b'{"traceEvents": [{"ph": "X", "name": "aten::mm", "ts": 1}]}', "traceEvents[0]"),
        (
            b'{"traceEvents": [{"ph": "M"}, {"ph": "X", "name": "aten::mm", "ts": 1, "dur": NaN}]}',
            "traceEvents[1]",
        ),
        (
            b'{"traceEvents": [{"ph": "X", "name": "aten::mm", "ts": 1, "dur": -2}]}',
            "traceEvents[0]",
        ),
    ],
)
def test_an_unreadable_trace_is_a_value_error_naming_the_file(
    tmp_path: Path, content: bytes | None, why: str
) -> None:
    bad = tmp_path / "bad trace.json"
    if content is not None:
        bad.write_bytes(content)
    good = _write(tmp_path / "good.json", [_x("aten::mm", 0, 1)])

    with pytest.raises(ValueError, match=re.escape(str(bad))) as raised:
        op_table(bad)
    if why != "missing":
        assert why in str(raised.value)
    with pytest.raises(ValueError, match=re.escape(str(bad))):
        op_diff(good, bad)


def test_a_directory_is_not_a_trace(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=re.escape(str(tmp_path))):
        op_table(tmp_path)


def _row(op: str, kind: str = "cpu_op", change: float = 1.5) -> dict[str, Any]:
    return {
        "op": op,
        "kind": kind,
        "baseline_us": 2.0,
        "candidate_us": 2.0 + change,
        "change_us": change,
        "baseline_calls": 1,
        "candidate_calls": 3,
    }


def test_render_op_diff_is_one_escaped_row_per_entry() -> None:
    names = ["aten::_to_copy", "evil|op", "*bold* <b>x</b> @octocat [link](http://x)", "`code`"]
    rows = [_row(name) for name in names] + [_row("gemm_kernel", kind="kernel", change=-0.5)]

    table = render_op_diff(rows).splitlines()

    assert table[0] == "| op | baseline µs | candidate µs | change µs | calls b→c |"
    body = table[2:]
    assert len(body) == len(rows)
    for line, row in zip(body, rows, strict=True):
        # An escaped "|" must not open a column: every row keeps the header's five cells.
        cells = [cell.strip() for cell in re.split(r"(?<!\\)\|", line)[1:-1]]
        assert len(cells) == 5, line
        assert cells[0].startswith(md(row["op"]))
    assert body[0] == "| aten::\\_to\\_copy | 2.0 | 3.5 | +1.5 | 1→3 |"
    assert body[-1] == "| gemm\\_kernel (kernel) | 2.0 | 1.5 | -0.5 | 1→3 |"
    assert "<b>" not in "\n".join(table) and "@octocat" not in "\n".join(table)


def test_render_op_diff_of_no_rows_says_so() -> None:
    assert render_op_diff([]) == "No op changed its self time between the two traces."
