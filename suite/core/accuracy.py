"""Correctness against an fp64 reference, using the rule of PyTorch's own accuracy checker.

A result passes when RMSE(result, fp64) <= k * RMSE(reference path, fp64) + tol: the result may
be somewhat less accurate than the trusted reference path in the same dtype, never much worse.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from suite.core.records import AccuracyCheck

if TYPE_CHECKING:
    import torch

# (k, tol) by dtype name; lower precision earns a larger multiplier and tolerance.
DEFAULT_TOLERANCES: dict[str, tuple[float, float]] = {
    "fp64": (2.0, 1e-10),
    "fp32": (2.0, 1e-5),
    "tf32": (3.0, 1e-3),
    "bf16": (3.0, 1e-3),
    "fp16": (3.0, 1e-3),
}


@dataclass(frozen=True)
class AccuracyVerdict:
    passed: bool
    rmse_result: float
    rmse_reference: float
    k: float
    tol: float

    def as_dict(self) -> AccuracyCheck:
        return {
            "passed": self.passed,
            "rmse_result": self.rmse_result,
            "rmse_reference": self.rmse_reference,
            "k": self.k,
            "tol": self.tol,
        }


# How far a checkpoint's continued training may stray, relative to the loss: the same weights and
# optimizer state continue alike; kernels of another pin may round differently, which is drift
# (a separate gate), not an incompatible checkpoint.
CHECKPOINT_TOLERANCE = 1e-5


def rmse(
    a: torch.Tensor | Sequence[torch.Tensor], b: torch.Tensor | Sequence[torch.Tensor]
) -> float:
    """Root-mean-square error over all elements of one tensor or a list of tensors, in fp64."""
    import torch

    left = [a] if isinstance(a, torch.Tensor) else list(a)
    right = [b] if isinstance(b, torch.Tensor) else list(b)
    if len(left) != len(right):
        raise ValueError(f"cannot compare {len(left)} tensors with {len(right)}")
    total = 0.0
    count = 0
    for x, y in zip(left, right, strict=True):
        if x.shape != y.shape:
            raise ValueError(f"shape mismatch: {tuple(x.shape)} vs {tuple(y.shape)}")
        diff = x.detach().to("cpu", torch.float64) - y.detach().to("cpu", torch.float64)
        total += float(diff.square().sum())
        count += diff.numel()
    if count == 0:
        return 0.0
    value = math.sqrt(total / count)
    return value if math.isfinite(value) else math.inf


def judge(
    rmse_result: float,
    rmse_reference: float,
    dtype: str,
    tolerances: dict[str, tuple[float, float]] | None = None,
) -> AccuracyVerdict:
    k, tol = (tolerances or DEFAULT_TOLERANCES).get(dtype, DEFAULT_TOLERANCES["fp32"])
    passed = math.isfinite(rmse_result) and rmse_result <= k * rmse_reference + tol
    return AccuracyVerdict(passed, rmse_result, rmse_reference, k, tol)


@dataclass(frozen=True)
class Drift:
    """The worst relative difference between two sets of saved outputs."""

    name: str  # the output it was found in; "" when there were none
    relative: float  # inf where an output is missing, reshaped, or not finite on either side
    missing: bool = False  # an output of the left side is absent or reshaped on the right


def tensor_drift(left: dict[str, torch.Tensor], right: dict[str, torch.Tensor]) -> Drift:
    """max |left - right| / max |left|, over every output of left.

    A NaN or an infinity anywhere (in either output, or in the difference) is infinite drift:
    comparisons with NaN are false, so a plain `rel > worst` would let it pass."""
    worst = Drift("", 0.0)
    for name, x in left.items():
        y = right.get(name)
        if y is None or y.shape != x.shape:
            return Drift(name, math.inf, missing=True)
        scale = max(float(x.double().abs().max()), 1e-12)
        rel = float((x.double() - y.double()).abs().max()) / scale
        if not math.isfinite(rel) or not math.isfinite(scale):
            rel = math.inf
        if rel > worst.relative:
            worst = Drift(name, rel)
    return worst
