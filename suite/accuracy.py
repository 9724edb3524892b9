"""Correctness against an fp64 reference, using the rule of PyTorch's own accuracy checker.

A result passes when RMSE(result, fp64) <= k * RMSE(reference path, fp64) + tol: the result may
be somewhat less accurate than the trusted reference path in the same dtype, never much worse.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

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
class Verdict:
    passed: bool
    rmse_result: float
    rmse_reference: float
    k: float
    tol: float

    def as_dict(self) -> dict[str, Any]:
        return {
            "passed": self.passed,
            "rmse_result": self.rmse_result,
            "rmse_reference": self.rmse_reference,
            "k": self.k,
            "tol": self.tol,
        }


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
) -> Verdict:
    k, tol = (tolerances or DEFAULT_TOLERANCES).get(dtype, DEFAULT_TOLERANCES["fp32"])
    passed = math.isfinite(rmse_result) and rmse_result <= k * rmse_reference + tol
    return Verdict(passed, rmse_result, rmse_reference, k, tol)
