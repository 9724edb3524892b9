"""The flex_attention workload: block-sparse masks and score mods, eager or compiled.

Each case runs ``torch.nn.attention.flex_attention`` with a ``BlockMask`` built from one of four
mask_mods and an optional score_mod, and runs SDPA with the equivalent dense mask beside it as the
same-dtype reference (explicit math attention for softcap, which SDPA cannot express). Truth is
math attention in float64 on the CPU.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING

from suite.workloads import _attention as att
from suite.workloads._timing import synced_median_s
from suite.workloads.base import CellContext, Param, Workload

if TYPE_CHECKING:
    import torch

ScoreMod = Callable[
    ["torch.Tensor", "torch.Tensor", "torch.Tensor", "torch.Tensor", "torch.Tensor"],
    "torch.Tensor",
]

SOFTCAP = 20.0
REFERENCE_TIMING_ITERS = 5
_EAGER_WARNING = r".*flex_attention called without torch\.compile.*"


def _score_mod(kind: str, slopes: torch.Tensor | None) -> ScoreMod | None:
    """flex score_mod for the case; None leaves scores untouched."""
    import torch

    if kind == "none":
        return None
    if kind == "alibi":
        assert slopes is not None

        def alibi(
            score: torch.Tensor, b: torch.Tensor, h: torch.Tensor, q: torch.Tensor, kv: torch.Tensor
        ) -> torch.Tensor:
            return score + slopes[h] * (kv - q)

        return alibi
    if kind == "softcap":

        def softcap(
            score: torch.Tensor, b: torch.Tensor, h: torch.Tensor, q: torch.Tensor, kv: torch.Tensor
        ) -> torch.Tensor:
            return torch.tanh(score / SOFTCAP) * SOFTCAP

        return softcap
    raise ValueError(f"unknown score_mod {kind!r}")


class FlexAttention(Workload):
    name = "flex_attention"
    description = (
        "FlexAttention with block-sparse masks and score mods (eager or torch.compile), "
        "against SDPA with the equivalent dense mask"
    )
    params = (
        Param(
            "mask",
            att.MASKS,
            att.MASKS,
            help="causal; causal sliding window; causal within packed documents; prefix LM",
        ),
        Param("score_mod", ("none", "alibi", "softcap"), ("none",), help="per-score modification"),
        Param("mode", ("eager", "compiled"), ("eager",), help="compiled = torch.compile(flex)"),
        Param("dtype", ("fp32", "bf16"), ("fp32",)),
        Param("pass", ("fwd", "fwd_bwd"), ("fwd",), help="forward only, or forward + backward"),
    )
    sizes = {
        "smoke": {
            # seq 512 spans 4x4 blocks of 128, enough for the masks' block sparsity to differ.
            "batch": 1,
            "heads": 4,
            "seq": 512,
            "head_dim": 32,
            "window": 128,
            "documents": 4,
            "prefix": 128,
        },
        "full": {
            "batch": 4,
            "heads": 16,
            "seq": 4096,
            "head_dim": 64,
            "window": 1024,
            "documents": 8,
            "prefix": 512,
        },
    }
    # Two blocks of 128 a side: each mask still differs in which blocks it skips.
    count_sizes = {"smoke": {"seq": 256}, "full": {"seq": 256, "window": 64, "prefix": 64}}
    throughput_unit = "tokens/s"
    size_tag_format = "s{seq}"

    def run(self, ctx: CellContext) -> None:
        # Eager mode is a deliberate row of the matrix, so torch's advice to compile is noise.
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=_EAGER_WARNING, category=UserWarning)
            self._run(ctx)

    def _run(self, ctx: CellContext) -> None:
        import torch
        import torch.nn.functional as F
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention

        ctx.seed(0)
        size = ctx.size
        batch, heads = int(size["batch"]), int(size["heads"])
        seq, head_dim = int(size["seq"]), int(size["head_dim"])
        mask_kind, score_kind = str(ctx.params["mask"]), str(ctx.params["score_mod"])
        backward = ctx.params["pass"] == "fwd_bwd"
        compiled = ctx.params["mode"] == "compiled"
        dtype = ctx.dtype()

        mod = att.mask_mod(mask_kind, size, ctx.device)
        block_mask = create_block_mask(mod, None, None, seq, seq, device=ctx.device)
        ctx.metric("block_sparsity", float(block_mask.sparsity()), "%")
        slopes = att.alibi_slopes(heads, ctx.device) if score_kind == "alibi" else None
        score_mod = _score_mod(score_kind, slopes)

        inputs = att.make_inputs(ctx, batch, heads, seq, head_dim, backward)
        grad_out = (
            torch.randn(batch, heads, seq, head_dim).to(ctx.device, dtype) if backward else None
        )
        flex = torch.compile(flex_attention) if compiled else flex_attention
        q, k, v = inputs

        def call() -> torch.Tensor:
            out = flex(q, k, v, score_mod=score_mod, block_mask=block_mask)
            assert isinstance(out, torch.Tensor)
            return out

        # On CPU with requires_grad, torch raises NotImplementedError here: that is the finding.
        step = att.attention_step(call, inputs, grad_out)
        ctx.measure(step, items_per_iter=batch * seq, unit=self.throughput_unit, compiled=compiled)
        result = att.outputs(step, inputs, backward)

        mask = att.dense_mask(mod, seq, ctx.device)
        # Truth's bias is built in float64 on the CPU: MPS has no float64.
        bias = None if slopes is None else att.alibi_bias(slopes.cpu(), seq, torch.float64)
        softcap = SOFTCAP if score_kind == "softcap" else None
        ref_inputs = att.same_dtype_copies(inputs)
        rq, rk, rv = ref_inputs
        if softcap is not None:
            reference_name = f"math attention with dense mask and softcap ({ctx.params['dtype']})"

            def ref_call() -> torch.Tensor:
                return att.math_attention(rq, rk, rv, mask=mask, softcap=softcap)
        else:
            sdpa_mask = mask
            reference_name = "SDPA with dense boolean mask"
            if slopes is not None:
                # SDPA takes one additive float mask: the ALiBi bias with -inf where masked.
                sdpa_mask = att.alibi_bias(slopes, seq, dtype).masked_fill(~mask, float("-inf"))
                reference_name = "SDPA with dense mask + ALiBi float bias"

            def ref_call() -> torch.Tensor:
                return F.scaled_dot_product_attention(rq, rk, rv, attn_mask=sdpa_mask)

        ref_step = att.attention_step(ref_call, ref_inputs, grad_out)
        reference = att.outputs(ref_step, ref_inputs, backward)
        ctx.metric(
            "reference_p50_s",
            synced_median_s(ref_step, ctx.backend.sync, REFERENCE_TIMING_ITERS),
            "s",
        )

        truth = att.fp64_truth(inputs, grad_out, mask=mask, bias=bias, softcap=softcap)
        att.check_all(ctx, result, reference, truth, reference_name)
