"""The linear_cross_entropy workload: a vocabulary head's loss, materialized or chunked.

Compares ``nn.Linear`` + ``F.cross_entropy`` with ``nn.LinearCrossEntropyLoss`` on its reference
path (``options=None``) and on its chunked path (``LinearCrossEntropyOptions()``), which never
holds the full [tokens, vocab] logits. One step is forward + backward: the loss and its gradients
with respect to the input and the weight. Every impl uses the same weight values.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from suite.workloads.base import CellContext, Param, Unsupported, Workload

if TYPE_CHECKING:
    import torch

# Rows of fp64 logits per truth chunk, about 512 MiB: bounds truth's memory at any vocab size.
_TRUTH_CHUNK_ELEMENTS = 2**26


def _truth_device(device: torch.device) -> torch.device:
    """Where fp64 truth runs: the cell's device (a 128k-vocab head in fp64 takes minutes on a
    CPU), except on MPS, which has no float64."""
    import torch

    return torch.device("cpu") if device.type == "mps" else device


def _fp64_truth(x: torch.Tensor, weight: torch.Tensor, target: torch.Tensor) -> list[torch.Tensor]:
    """[loss, grad_input, grad_weight] in float64 via logsumexp, in row chunks."""
    import torch

    device = _truth_device(x.device)
    x64 = x.detach().to(device, torch.float64)
    w64 = weight.detach().to(device, torch.float64).requires_grad_()
    t = target.to(device)
    rows = x64.shape[0]
    chunk = max(1, _TRUTH_CHUNK_ELEMENTS // w64.shape[0])
    total = torch.zeros((), dtype=torch.float64, device=device)
    grad_x = []
    for start in range(0, rows, chunk):
        xs = x64[start : start + chunk].clone().requires_grad_()
        logits = xs @ w64.T
        picked = logits.gather(1, t[start : start + chunk, None]).squeeze(1)
        part = (torch.logsumexp(logits, dim=-1) - picked).sum() / rows
        part.backward()
        total += part.detach()
        assert xs.grad is not None
        grad_x.append(xs.grad)
    assert w64.grad is not None
    return [total, torch.cat(grad_x), w64.grad]


def _explicit_reference(
    x: torch.Tensor, weight: torch.Tensor, target: torch.Tensor
) -> list[torch.Tensor]:
    """The same loss spelled out in the cell's dtype: logits -> log_softmax -> gather -> mean."""
    import torch

    xr = x.detach().clone().requires_grad_()
    wr = weight.detach().clone().requires_grad_()
    log_probs = torch.log_softmax(xr @ wr.T, dim=-1)
    loss = -log_probs.gather(1, target[:, None]).mean()
    loss.backward()
    assert xr.grad is not None and wr.grad is not None
    return [loss.detach(), xr.grad, wr.grad]


class LinearCrossEntropy(Workload):
    name = "linear_cross_entropy"
    description = (
        "Vocabulary-head loss + backward: nn.Linear + F.cross_entropy vs "
        "nn.LinearCrossEntropyLoss (reference path and chunked)"
    )
    params = (
        Param(
            "impl",
            ("reference", "default", "chunked"),
            ("reference", "default", "chunked"),
            help="reference = nn.Linear + F.cross_entropy; default = LinearCrossEntropyLoss "
            "with options=None; chunked = options=LinearCrossEntropyOptions()",
        ),
        Param("dtype", ("fp32", "bf16"), ("fp32",)),
    )
    sizes = {
        # fp32 logits are 16 MiB here, so the chunked path's lower peak shows even on a CPU,
        # and a step (~25 ms on 2 cores) leaves room for dozens of samples per process.
        "smoke": {"tokens": 1024, "hidden": 64, "vocab": 4096},
        "full": {"tokens": 16384, "hidden": 4096, "vocab": 128256},
    }
    count_sizes = {"smoke": {"tokens": 256, "vocab": 1024}, "full": {"tokens": 256, "vocab": 1024}}
    throughput_unit = "tokens/s"
    size_tag_format = "n{tokens}v{vocab}"

    def run(self, ctx: CellContext) -> None:
        import torch
        from torch import nn

        impl = str(ctx.params["impl"])
        if impl != "reference" and not (
            hasattr(nn, "LinearCrossEntropyLoss") and hasattr(nn, "LinearCrossEntropyOptions")
        ):
            raise Unsupported(f"torch {torch.__version__} has no nn.LinearCrossEntropyLoss")

        ctx.seed(0)
        tokens, hidden, vocab = (int(ctx.size[k]) for k in ("tokens", "hidden", "vocab"))
        dtype = ctx.dtype()
        # Drawn in float32 on the CPU, then cast: identical values on every backend and pin.
        # The 1/sqrt(hidden) scale gives unit-variance logits, as in a trained head.
        weight = (torch.randn(vocab, hidden) * hidden**-0.5).to(ctx.device, dtype)
        x = torch.randn(tokens, hidden).to(ctx.device, dtype).requires_grad_()
        target = torch.randint(0, vocab, (tokens,)).to(ctx.device)

        param, loss_fn = self._build(impl, hidden, vocab, weight)

        def step() -> torch.Tensor:
            # Drop last step's gradients before the next backward allocates new ones, so the
            # measured peak is one step's, not one step's plus the previous step's leftovers.
            x.grad = None
            param.grad = None
            loss = loss_fn(x, target)
            loss.backward()
            return loss.detach()

        ctx.measure(step, items_per_iter=tokens, unit=self.throughput_unit)
        loss = step()
        assert x.grad is not None and param.grad is not None
        result = [loss, x.grad.detach(), param.grad.detach()]
        ctx.metric("loss", float(loss))

        reference = _explicit_reference(x, weight, target)
        truth = _fp64_truth(x, weight, target)
        self._check(ctx, tokens, result, reference, truth)
        if ctx.backend.device_type == "cuda":
            self._cuda_region_peaks(ctx, impl, hidden, vocab, weight, step, x, target)

    def _cuda_region_peaks(
        self,
        ctx: CellContext,
        impl: str,
        hidden: int,
        vocab: int,
        weight: torch.Tensor,
        step: Callable[[], torch.Tensor],
        x: torch.Tensor,
        target: torch.Tensor,
    ) -> None:
        """One step of this impl and one of Linear + cross_entropy, in this process, each its own
        allocator region (peak stats reset, gradients dropped): what the chunked loss saves."""
        import torch

        def region_peak(fn: Callable[[], torch.Tensor]) -> int:
            x.grad = None
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            before = torch.cuda.memory_allocated()
            fn()
            torch.cuda.synchronize()
            return int(torch.cuda.max_memory_allocated() - before)

        mine = region_peak(step)
        ref_param, ref_loss = self._build("reference", hidden, vocab, weight)

        def reference_step() -> torch.Tensor:
            ref_param.grad = None
            loss = ref_loss(x, target)
            loss.backward()
            return loss.detach()

        theirs = region_peak(reference_step)
        ctx.metric("cuda_region_peak_bytes", mine, "bytes")
        ctx.metric("cuda_region_peak_reference_bytes", theirs, "bytes")
        ctx.metric("cuda_region_peak_vs_reference", mine / theirs if theirs else None, "x")

    @staticmethod
    def _build(
        impl: str, hidden: int, vocab: int, weight: torch.Tensor
    ) -> tuple[torch.Tensor, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]]:
        """(the weight parameter that receives .grad, loss(x, target)) for one impl."""
        import torch
        import torch.nn.functional as F
        from torch import nn

        device, dtype = weight.device, weight.dtype
        if impl == "reference":
            linear = nn.Linear(hidden, vocab, bias=False, device=device, dtype=dtype)
            with torch.no_grad():
                linear.weight.copy_(weight)

            def linear_then_ce(x: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
                return F.cross_entropy(linear(x), target)

            return linear.weight, linear_then_ce
        options = nn.LinearCrossEntropyOptions() if impl == "chunked" else None
        module = nn.LinearCrossEntropyLoss(
            hidden, vocab, bias=False, device=device, dtype=dtype, options=options
        )
        with torch.no_grad():
            module.linear.weight.copy_(weight)
        return module.linear.weight, module

    @staticmethod
    def _check(
        ctx: CellContext,
        tokens: int,
        result: Sequence[torch.Tensor],
        reference: Sequence[torch.Tensor],
        truth: Sequence[torch.Tensor],
    ) -> None:
        """The loss as is; gradients scaled by the token count, i.e. compared as gradients of the
        summed loss. A mean over thousands of tokens makes every gradient element ~1e-5, at or
        below the checker's absolute tolerance, which would then pass any gradient at all."""
        import torch

        def summed(t: torch.Tensor) -> torch.Tensor:
            # float64 on the CPU before scaling, so the scaling adds no rounding of its own.
            return t.detach().to("cpu", torch.float64) * tokens

        name = f"explicit logits -> log_softmax -> gather ({ctx.params['dtype']})"
        ctx.check_accuracy(result[0], reference[0], truth[0], reference_name=name, label="loss")
        labels = ("grad_input", "grad_weight")
        for label, res, ref, t64 in zip(labels, result[1:], reference[1:], truth[1:], strict=True):
            ctx.check_accuracy(
                summed(res), summed(ref), summed(t64), reference_name=name, label=label
            )
