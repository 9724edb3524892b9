"""The small seeded models shared by the compile and export workloads, and their inputs.

``block`` is a pre-norm transformer block (LayerNorm -> causal multi-head self-attention through
``F.scaled_dot_product_attention`` -> residual -> LayerNorm -> GELU MLP -> residual); ``mlp`` is
its MLP half alone. Sizes come from a dict (``dim``, ``heads``, ``batch``, optional
``mlp_ratio``). Weights are drawn on the CPU in float32 from their own seed, then moved, so that
every device and dtype starts from the same numbers. torch is imported inside functions only.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch
    from torch import nn

MODELS = ("block", "mlp")


@functools.cache
def _classes() -> dict[str, type[nn.Module]]:
    """The model classes, defined once per process so that torch stays a lazy import."""
    import torch.nn.functional as F
    from torch import nn

    class Mlp(nn.Module):
        def __init__(self, dim: int, hidden: int) -> None:
            super().__init__()
            self.norm = nn.LayerNorm(dim)
            self.fc1 = nn.Linear(dim, hidden)
            self.fc2 = nn.Linear(hidden, dim)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            out: torch.Tensor = x + self.fc2(F.gelu(self.fc1(self.norm(x))))
            return out

    class Block(nn.Module):
        def __init__(self, dim: int, heads: int, hidden: int) -> None:
            super().__init__()
            if dim % heads:
                raise ValueError(f"dim {dim} is not divisible by heads {heads}")
            self.heads = heads
            self.norm = nn.LayerNorm(dim)
            self.qkv = nn.Linear(dim, 3 * dim)
            self.proj = nn.Linear(dim, dim)
            self.mlp = Mlp(dim, hidden)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            batch, seq, dim = x.shape
            qkv = self.qkv(self.norm(x)).view(batch, seq, 3, self.heads, dim // self.heads)
            q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)
            attn = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.proj(attn.transpose(1, 2).reshape(batch, seq, dim))
            out: torch.Tensor = self.mlp(x)
            return out

    return {"block": Block, "mlp": Mlp}


def build(
    kind: str,
    size: Mapping[str, Any],
    *,
    seed: int = 0,
    device: torch.device | str = "cpu",
    dtype: torch.dtype | None = None,
) -> nn.Module:
    """A fresh model of `kind` in eval mode; the same seed gives the same weights anywhere."""
    import torch

    if kind not in MODELS:
        raise ValueError(f"unknown model {kind!r}; expected one of {', '.join(MODELS)}")
    dim = int(size["dim"])
    hidden = int(size.get("mlp_ratio", 4)) * dim
    cls = _classes()[kind]
    # A private RNG stream: building a model must not move the cell's global seed.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = cls(dim, int(size["heads"]), hidden) if kind == "block" else cls(dim, hidden)
    return model.to(device=device, dtype=dtype or torch.float32).eval()


def make_input(
    size: Mapping[str, Any],
    seq: int,
    *,
    seed: int = 0,
    device: torch.device | str = "cpu",
    dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """Activations of shape (batch, seq, dim), drawn on the CPU from their own generator."""
    import torch

    gen = torch.Generator().manual_seed(seed * 100_003 + seq)
    x = torch.randn(int(size["batch"]), seq, int(size["dim"]), generator=gen)
    return x.to(device=device, dtype=dtype or torch.float32)


def fp64_copy(model: nn.Module) -> nn.Module:
    """The same weights in float64 on the CPU (MPS has no float64), for truth."""
    import copy

    import torch

    return copy.deepcopy(model).to(device="cpu", dtype=torch.float64)


class BlockModels:
    """For the workloads whose model under test is one of MODELS (compile and export): a plugin
    subclass overrides build_model to put its own model through the same measurements."""

    def build_model(
        self, kind: str, size: Mapping[str, Any], device: torch.device | str
    ) -> nn.Module:
        """The model under test."""
        return build(kind, size, device=device)
