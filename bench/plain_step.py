"""Time one cell's step with a plain loop in this fresh process, as a user's script would.

The workload builds its step exactly as in a worker; then, instead of the harness, a bare
perf_counter loop times it (torch defaults, no allocator setting, no thread beside it).
Prints one JSON line: {"p50_s": ..., "samples": N}.

    python bench/plain_step.py CELL_SPEC_JSON [--seconds 1.0]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import time
from collections.abc import Callable
from typing import Any

from suite.core.spec import CellSpec
from suite.worker.backends import get
from suite.worker.cell import WorkerContext
from suite.workloads import resolve


class _Captured(Exception):
    pass


class PlainContext(WorkerContext):
    """The worker's context, except that measure() hands the step back untimed."""

    step_fn: Callable[[], Any] | None = None

    def measure(self, fn: Callable[[], Any], **_: Any) -> None:  # type: ignore[override]
        self.step_fn = fn
        raise _Captured


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("spec")
    parser.add_argument("--seconds", type=float, default=1.0)
    args = parser.parse_args()
    spec = CellSpec.from_json(args.spec)
    backend = get(spec.backend)
    resolved = resolve(spec.ref)
    ctx = PlainContext(spec, backend, dict(resolved.workload.sizes.get(spec.profile, {})))
    with contextlib.suppress(_Captured):
        resolved.workload.run(ctx)
    fn = ctx.step_fn
    assert fn is not None, "the workload never called ctx.measure()"
    for _ in range(4):  # the first call (compilation) and warmup, as the harness does
        fn()
    backend.sync()
    samples = []
    end = time.perf_counter() + args.seconds
    while time.perf_counter() < end or len(samples) < 20:
        start = time.perf_counter()
        fn()
        backend.sync()
        samples.append(time.perf_counter() - start)
    print(json.dumps({"p50_s": statistics.median(samples), "samples": len(samples)}))


if __name__ == "__main__":
    main()
