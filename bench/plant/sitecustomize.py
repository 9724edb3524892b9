"""A planted CPU cost, for `bench/readme_ab.py --plant`: a candidate that is the baseline's own
environment, started through a wrapper that puts this folder first on PYTHONPATH. Python imports
this file at startup; once `torch.nn.functional` is imported, its scaled_dot_product_attention
also spins a Python loop sized to FRACTION of the call's own cost, in one cell only: fp32, no
mask, not causal is sdpa.none.fp32.fwd.s256@cpu in the built-in matrix, at its timed size and at
its counted one. Every other cell runs the baseline's code. The cost is real work in the step, so
instruction counts and clocks both see it.

The loop, not a second, smaller attention call: on this cell's small inputs a call's fixed cost
(dispatch, buffers) is ~6% of the step, whatever share of the queries it attends. The loop's size
scales with the attention's work (batch x heads x queries x keys x head dim) from one measured
point: the call costs ~3.44 M instructions at [2, 4, 128, 32] on torch 2.13.0 (its instruction
count under callgrind), and one turn of the loop LOOP_INSTRUCTIONS (measured: 537 turns added
~0.09 M). The wrapper's own Python adds ~7 k a call (~0.2%): the gate reports the planted cost as
counted, which is the figure to quote.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import os
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import Any

FRACTION = float(os.environ.get("TORCH_MATRIX_PLANT_FRACTION", "0.03"))
CALL_INSTRUCTIONS = 3.44e6  # at [2, 4, 128, 32], fp32
CALL_WORK = 2 * 4 * 128 * 128 * 32
LOOP_INSTRUCTIONS = 165.0


def _spin(turns: int) -> None:
    for _ in range(turns):
        pass


def _plant(functional: ModuleType) -> None:
    original = functional.scaled_dot_product_attention

    def planted(query: Any, key: Any, value: Any, *args: Any, **kwargs: Any) -> Any:
        out = original(query, key, value, *args, **kwargs)
        plain = not args and kwargs.get("attn_mask") is None and not kwargs.get("is_causal")
        if plain and query.dim() == 4 and str(query.dtype) == "torch.float32":
            batch, heads, queries, dim = query.shape
            work = batch * heads * queries * key.shape[-2] * dim
            _spin(round(FRACTION * CALL_INSTRUCTIONS * work / CALL_WORK / LOOP_INSTRUCTIONS))
        return out

    functional.scaled_dot_product_attention = planted


class _AfterImport(importlib.abc.MetaPathFinder):
    """Plants once torch.nn.functional has run, without importing torch any earlier."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> Any:
        if fullname != "torch.nn.functional":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec
        run = spec.loader.exec_module

        def exec_module(module: ModuleType) -> None:
            run(module)
            _plant(module)

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


sys.meta_path.insert(0, _AfterImport())
