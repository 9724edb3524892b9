"""A workload that fails unless the variable a side's wrapper script exports reaches it: the
worker must run in the environment its side's interpreter gives, fork server or not."""

from __future__ import annotations

import os

from suite.workloads import CellContext, Workload

WRAPPED_VAR = "TORCH_MATRIX_TEST_WRAPPED"
WRAPPED_VALUE = "exported-by-the-wrapper"


class Wrapped(Workload):
    name = "wrapped"

    def run(self, ctx: CellContext) -> None:
        import torch

        seen = os.environ.get(WRAPPED_VAR)
        if seen != WRAPPED_VALUE:
            raise RuntimeError(
                f"the side's wrapper exported {WRAPPED_VAR}, the worker saw {seen!r}"
            )
        a = torch.ones(4)
        ctx.measure(lambda: a + a, items_per_iter=4)
