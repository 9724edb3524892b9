"""The CPU's peak-memory figure (suite/worker/memory.py CpuAllocatorTracker): the most bytes the
tensors held at once, exact for a known allocation, the same call after call, RSS beside it, and
RSS as the figure where the profiler cannot run."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from suite.worker.memory import CpuAllocatorTracker

MIB = 1 << 20


def _peak(step: Any, calls: int = 3) -> dict[str, Any]:
    tracker = CpuAllocatorTracker()
    tracker.start()
    for _ in range(calls):
        step()
    tracker.stop()
    assert tracker.measured
    return dict(tracker.as_dict())


def test_a_known_allocation_is_read_at_its_size_and_repeats() -> None:
    def step() -> None:
        block = torch.zeros(24 * MIB, dtype=torch.uint8)
        del block

    first, second = _peak(step), _peak(step)
    assert first["method"] == "cpu-allocator"
    assert first["peak_bytes"] == second["peak_bytes"] == 24 * MIB
    assert first["rss_peak_bytes"] >= 0  # kept beside it, advisory


def test_a_planted_tenth_is_seen_as_a_tenth() -> None:
    """Two blocks held together make the step's peak; 10% more held across the step is +10%."""

    def step(extra: int = 0) -> float:
        hold = torch.zeros(extra, dtype=torch.uint8) if extra else None
        a = torch.ones(1024, 1024)
        b = a * 2.0
        result = float((a + b).sum())
        del hold
        return result

    base = _peak(step)["peak_bytes"]
    planted = _peak(lambda: step(base // 10))["peak_bytes"]
    assert planted / base - 1 == pytest.approx(0.10, abs=0.01)


def test_what_was_held_before_the_pass_is_outside_the_figure() -> None:
    """The figure is what the pass's own allocations held at once: a tensor allocated before the
    pass and freed in it neither counts nor makes room."""
    held = [torch.zeros(16 * MIB, dtype=torch.uint8)]

    def step() -> None:
        if held:
            held.pop()  # frees 16 MiB allocated before the pass
        block = torch.zeros(8 * MIB, dtype=torch.uint8)
        del block

    assert _peak(step)["peak_bytes"] == 8 * MIB


def test_without_the_profiler_rss_is_the_figure(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch.profiler

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("no profiler in this build")

    monkeypatch.setattr(torch.profiler, "profile", broken)
    record = _peak(lambda: torch.zeros(8 * MIB, dtype=torch.uint8).fill_(1))
    assert record["method"].startswith("cpu-rss"), record
    assert "rss_peak_bytes" not in record


def test_state_a_step_replaces_counts_once_from_the_first_pass() -> None:
    """A training step frees the gradients the step before allocated and allocates new ones.
    The profiler does not report the free of a block allocated before it started, so without
    the priming call the first pass in a process counts them twice; with it (memory_pass's
    mark), every pass reads the same figure."""
    from suite.worker.measure import memory_pass

    model = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU())
    x = torch.randn(64, 256)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

    def step() -> None:
        optimizer.zero_grad()
        model(x).pow(2).mean().backward()
        optimizer.step()

    for _ in range(3):
        step()
    unprimed = CpuAllocatorTracker()
    unprimed.start()
    step()
    unprimed.stop()
    figures = []
    for _ in range(3):
        tracker = CpuAllocatorTracker()
        memory_pass(step, lambda: None, tracker.start, tracker.stop, mark=tracker.mark)
        figures.append(tracker.peak_bytes)
    assert len(set(figures)) == 1, figures
    assert unprimed.peak_bytes > figures[0]  # the grads freed unreported, counted again
