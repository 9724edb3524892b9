"""A team's own FlexAttention pattern as a torch-matrix workload: causal attention in which
every query also sees the first `sinks` tokens (attention sinks), checked against SDPA with the
same dense mask and timed eager or compiled.

Run it:  torch-matrix run --workload examples/sink_mask.py:SinkMask --backend cpu
"""

from __future__ import annotations

import warnings
from typing import Any

from suite.workloads import CellContext, Param, Workload


class SinkMask(Workload):
    name = "sink_mask"
    description = "causal FlexAttention with attention-sink tokens, vs SDPA"
    params = (
        Param("sinks", (1, 4, 16), (4,), "tokens every query may attend to"),
        Param("mode", ("eager", "compiled"), ("eager",)),
        Param("dtype", ("fp32", "bf16"), ("fp32",)),
    )
    sizes = {
        "smoke": {"batch": 1, "heads": 2, "seq": 256, "head_dim": 32},
        "full": {"batch": 4, "heads": 16, "seq": 8192, "head_dim": 128},
    }

    def size_tag(self, params: Any, profile: str) -> str:
        return f"s{self.sizes[profile]['seq']}"

    def run(self, ctx: CellContext) -> None:
        import torch
        import torch.nn.functional as F
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention

        ctx.seed(0)
        b, h, s, d = (int(ctx.size[k]) for k in ("batch", "heads", "seq", "head_dim"))
        sinks = int(ctx.params["sinks"])

        def sink_causal(batch: Any, head: Any, q_idx: Any, kv_idx: Any) -> Any:
            return (q_idx >= kv_idx) | (kv_idx < sinks)

        block_mask = create_block_mask(sink_causal, None, None, s, s, device=str(ctx.device))
        q, k, v = (torch.randn(b, h, s, d, device=ctx.device, dtype=ctx.dtype()) for _ in range(3))
        attend = (
            torch.compile(flex_attention) if ctx.params["mode"] == "compiled" else flex_attention
        )

        def step() -> Any:
            with torch.no_grad(), warnings.catch_warnings():
                warnings.simplefilter("ignore")  # eager flex_attention warns that it is unfused
                return attend(q, k, v, block_mask=block_mask)

        ctx.measure(
            step, items_per_iter=b * s, unit="tokens/s", compiled=ctx.params["mode"] == "compiled"
        )

        idx = torch.arange(s, device=ctx.device)
        dense = (idx[:, None] >= idx[None, :]) | (idx[None, :] < sinks)
        reference = F.scaled_dot_product_attention(q, k, v, attn_mask=dense)
        truth = F.scaled_dot_product_attention(
            q.double().cpu(), k.double().cpu(), v.double().cpu(), attn_mask=dense.cpu()
        )
        ctx.check_accuracy(step(), reference, truth, reference_name="sdpa with dense sink mask")
        ctx.metric("sinks", sinks)
