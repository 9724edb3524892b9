"""Attention pieces shared by the flex_attention and sdpa workloads: masks and math attention.

Masks are written once, as flex-style ``mask_mod`` functions of index tensors, and evaluated on
broadcast index grids to get the dense boolean mask that SDPA and the math paths use. The explicit
math attention is both the same-dtype reference where SDPA cannot express a case and, in float64
on the CPU, the truth every result is judged against.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from suite.workloads.base import CellContext

if TYPE_CHECKING:
    import torch

MaskMod = Callable[["torch.Tensor", "torch.Tensor", "torch.Tensor", "torch.Tensor"], "torch.Tensor"]

MASKS = ("causal", "sliding_window", "document", "prefix_lm")
GRAD_LABELS = ("grad_q", "grad_k", "grad_v")


def document_ids(seq: int, documents: int, device: torch.device, seed: int = 0) -> torch.Tensor:
    """Document index per position; cut points come from their own generator, so the layout
    depends only on (seq, documents, seed), not on what else consumed the global RNG."""
    import torch

    if not 1 <= documents <= seq:
        raise ValueError(f"documents={documents} must lie in [1, seq={seq}]")
    gen = torch.Generator().manual_seed(seed)
    cuts = torch.randperm(seq - 1, generator=gen)[: documents - 1] + 1
    starts = torch.zeros(seq, dtype=torch.long)
    starts[cuts] = 1
    return torch.cumsum(starts, 0).to(device)


def mask_mod(kind: str, size: Mapping[str, Any], device: torch.device) -> MaskMod:
    """The mask as a function of (batch, head, query index, key index) tensors."""
    if kind == "causal":

        def causal(
            b: torch.Tensor, h: torch.Tensor, q: torch.Tensor, kv: torch.Tensor
        ) -> torch.Tensor:
            return q >= kv

        return causal
    if kind == "sliding_window":
        window = int(size["window"])

        def sliding(
            b: torch.Tensor, h: torch.Tensor, q: torch.Tensor, kv: torch.Tensor
        ) -> torch.Tensor:
            return (q >= kv) & (q - kv < window)

        return sliding
    if kind == "document":
        # Packed causal-LM training: attention stays causal and never crosses a document edge.
        docs = document_ids(int(size["seq"]), int(size["documents"]), device)

        def document(
            b: torch.Tensor, h: torch.Tensor, q: torch.Tensor, kv: torch.Tensor
        ) -> torch.Tensor:
            return (docs[q] == docs[kv]) & (q >= kv)

        return document
    if kind == "prefix_lm":
        prefix = int(size["prefix"])

        def prefix_lm(
            b: torch.Tensor, h: torch.Tensor, q: torch.Tensor, kv: torch.Tensor
        ) -> torch.Tensor:
            return (kv < prefix) | (q >= kv)

        return prefix_lm
    raise ValueError(f"unknown mask {kind!r}; expected one of {', '.join(MASKS)}")


def dense_mask(mod: MaskMod, seq: int, device: torch.device) -> torch.Tensor:
    """Boolean [1, 1, seq, seq] mask (True = attend). Every mask here ignores batch and head."""
    import torch

    idx = torch.arange(seq, device=device)
    zero = torch.zeros((), dtype=torch.long, device=device)
    return mod(zero, zero, idx.view(seq, 1), idx.view(1, seq)).view(1, 1, seq, seq)


def alibi_slopes(heads: int, device: torch.device) -> torch.Tensor:
    """The geometric per-head slopes of ALiBi (Press et al.), in float32."""
    import torch

    exponents = torch.arange(1, heads + 1, dtype=torch.float32, device=device)
    return torch.pow(2.0, -8.0 * exponents / heads)


def alibi_bias(slopes: torch.Tensor, seq: int, dtype: torch.dtype) -> torch.Tensor:
    """Dense [1, heads, seq, seq] ALiBi bias, computed in float32 (or float64) then cast."""
    import torch

    work = torch.float64 if dtype == torch.float64 else torch.float32
    idx = torch.arange(seq, device=slopes.device, dtype=work)
    distance = idx.view(1, seq) - idx.view(seq, 1)
    bias = slopes.to(work).view(1, -1, 1, 1) * distance.view(1, 1, seq, seq)
    return bias.to(dtype)


def math_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    mask: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
    softcap: float | None = None,
) -> torch.Tensor:
    """softmax(mask(bias + cap(q k^T / sqrt(d)))) v, every step in the inputs' dtype."""
    import torch

    scores = (q @ k.transpose(-2, -1)) * (q.shape[-1] ** -0.5)
    if softcap is not None:
        scores = torch.tanh(scores / softcap) * softcap
    if bias is not None:
        scores = scores + bias
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


def fp64_truth(
    inputs: Sequence[torch.Tensor],
    grad_out: torch.Tensor | None,
    *,
    mask: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
    softcap: float | None = None,
) -> list[torch.Tensor]:
    """[out] or [out, dq, dk, dv] in float64 on the CPU, one batch element at a time.

    The batch loop bounds host memory: a full-profile fp64 score matrix for all batch elements
    at once would need tens of GB.
    """
    import torch

    cpu = torch.device("cpu")
    mask64 = None if mask is None else mask.to(cpu)
    bias64 = None if bias is None else bias.to(cpu, torch.float64)
    need_grad = grad_out is not None
    pieces: list[list[torch.Tensor]] = []
    for b in range(inputs[0].shape[0]):
        q, k, v = (
            t[b : b + 1].detach().to(cpu, torch.float64).requires_grad_(need_grad) for t in inputs
        )
        with torch.set_grad_enabled(need_grad):
            out = math_attention(q, k, v, mask=mask64, bias=bias64, softcap=softcap)
        row = [out.detach()]
        if grad_out is not None:
            go = grad_out[b : b + 1].detach().to(cpu, torch.float64)
            row.extend(g.detach() for g in torch.autograd.grad(out, (q, k, v), go))
        pieces.append(row)
    return [torch.cat(parts) for parts in zip(*pieces, strict=True)]


def attention_step(
    call: Callable[[], torch.Tensor], inputs: Sequence[torch.Tensor], grad_out: torch.Tensor | None
) -> Callable[[], torch.Tensor]:
    """One steady-state iteration: forward under no_grad, or forward + backward."""
    import torch

    if grad_out is None:

        def forward() -> torch.Tensor:
            with torch.no_grad():
                return call()

        return forward

    def forward_backward() -> torch.Tensor:
        # Fresh gradients each step, so the last call's .grad is exactly one pass's gradient.
        for t in inputs:
            t.grad = None
        out = call()
        out.backward(grad_out)
        return out

    return forward_backward


def outputs(
    step: Callable[[], torch.Tensor], inputs: Sequence[torch.Tensor], backward: bool
) -> list[torch.Tensor]:
    """Run one step and return [out] or [out, dq, dk, dv], detached."""
    out = step().detach()
    if not backward:
        return [out]
    grads = [t.grad for t in inputs]
    if any(g is None for g in grads):
        raise RuntimeError("backward produced no gradient for an attention input")
    return [out, *(g.detach() for g in grads if g is not None)]


def check_all(
    ctx: CellContext,
    result: Sequence[torch.Tensor],
    reference: Sequence[torch.Tensor],
    truth: Sequence[torch.Tensor],
    reference_name: str,
) -> None:
    """One correctness check per tensor: the output, then each input gradient if present."""
    labels = ("output", *GRAD_LABELS)[: len(result)]
    for label, res, ref, t64 in zip(labels, result, reference, truth, strict=True):
        ctx.check_accuracy(res, ref, t64, reference_name=reference_name, label=label)


def make_inputs(
    ctx: CellContext, batch: int, heads: int, seq: int, head_dim: int, requires_grad: bool
) -> list[torch.Tensor]:
    """Seeded q, k, v of shape [batch, heads, seq, head_dim] on the cell's device and dtype."""
    import torch

    shape = (batch, heads, seq, head_dim)
    # Draw in float32 on the CPU, then cast: the same values on every backend and both pins.
    return [
        torch.randn(shape).to(ctx.device, ctx.dtype()).requires_grad_(requires_grad)
        for _ in range(3)
    ]


def same_dtype_copies(inputs: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """Independent leaves with the same values, so the reference path keeps its own .grad."""
    return [t.detach().clone().requires_grad_(t.requires_grad) for t in inputs]
