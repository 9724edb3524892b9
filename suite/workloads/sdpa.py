"""The sdpa workload: dense ``F.scaled_dot_product_attention``, unmasked or causal.

Its own row so that a regression in the fused dense kernels is not hidden behind flex_attention.
The same-dtype reference is explicit math attention; truth is math attention in float64 on the
CPU.
"""

from __future__ import annotations

from collections.abc import Mapping

from suite.workloads import _attention as att
from suite.workloads.base import CellContext, Param, ParamValue, Workload


class Sdpa(Workload):
    name = "sdpa"
    description = "Dense scaled_dot_product_attention (no mask or causal), forward or fwd+bwd"
    params = (
        Param("mask", ("none", "causal"), ("none", "causal"), help="causal uses is_causal=True"),
        Param("dtype", ("fp32", "bf16"), ("fp32", "bf16")),
        Param("pass", ("fwd", "fwd_bwd"), ("fwd",), help="forward only, or forward + backward"),
    )
    sizes = {
        "smoke": {"batch": 2, "heads": 4, "seq": 256, "head_dim": 32},
        "full": {"batch": 4, "heads": 16, "seq": 4096, "head_dim": 128},
    }
    # Counted at a shorter sequence: under Valgrind the step at 256 took 2 s uninstrumented.
    count_sizes = {
        "smoke": {"seq": 128},
        "full": {"batch": 1, "heads": 4, "seq": 256, "head_dim": 64},
    }
    throughput_unit = "tokens/s"

    def size_tag(self, params: Mapping[str, ParamValue], profile: str) -> str | None:
        return f"s{self.sizes[profile]['seq']}"

    def run(self, ctx: CellContext) -> None:
        import torch
        import torch.nn.functional as F

        ctx.seed(0)
        size = ctx.size
        batch, heads = int(size["batch"]), int(size["heads"])
        seq, head_dim = int(size["seq"]), int(size["head_dim"])
        causal = ctx.params["mask"] == "causal"
        backward = ctx.params["pass"] == "fwd_bwd"

        inputs = att.make_inputs(ctx, batch, heads, seq, head_dim, backward)
        grad_out = (
            torch.randn(batch, heads, seq, head_dim).to(ctx.device, ctx.dtype())
            if backward
            else None
        )
        q, k, v = inputs

        def call() -> torch.Tensor:
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

        step = att.attention_step(call, inputs, grad_out)
        ctx.measure(step, items_per_iter=batch * seq, unit=self.throughput_unit)
        result = att.outputs(step, inputs, backward)

        # is_causal is the top-left aligned lower triangle, which is the causal mask_mod for
        # square attention; the explicit mask lets the reference and truth say the same thing.
        mask = (
            att.dense_mask(att.mask_mod("causal", size, ctx.device), seq, ctx.device)
            if causal
            else None
        )
        ref_inputs = att.same_dtype_copies(inputs)
        rq, rk, rv = ref_inputs

        def ref_call() -> torch.Tensor:
            return att.math_attention(rq, rk, rv, mask=mask)

        reference = att.outputs(
            att.attention_step(ref_call, ref_inputs, grad_out), ref_inputs, backward
        )
        truth = att.fp64_truth(inputs, grad_out, mask=mask)
        reference_name = f"math attention ({ctx.params['dtype']})" + (
            " with dense causal mask" if causal else ""
        )
        att.check_all(ctx, result, reference, truth, reference_name)
