"""Determinism: a seeded forward and backward, run twice in this process and once more in a
fresh process; outputs and every gradient compared bitwise. With `algorithms: deterministic`
torch.use_deterministic_algorithms is on and any difference fails; with `algorithms: default`
it is off, and the cell detects the kernels that are nondeterministic by default (the
`scatter_add` target's index_add forward and index_select backward use atomics on CUDA).

The tensors of the first run are also kept (ctx.save_outputs) for cross-version drift.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from suite.workloads.base import CellContext, Param, Unsupported, Workload

if TYPE_CHECKING:
    import torch

SIZES = {
    "smoke": {"batch": 4, "seq": 64, "dim": 64, "heads": 4},
    "full": {"batch": 8, "seq": 1024, "dim": 1024, "heads": 16},
}
SECOND_PROCESS_TIMEOUT_S = 600.0
BUCKETS = 16  # few buckets for many rows: many atomic adds land on each
ALGORITHMS = ("deterministic", "default")


def _set_algorithms(deterministic: bool) -> None:
    import torch

    if deterministic:
        # Must be set before the first cuBLAS call for deterministic CUDA matmuls.
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(deterministic)


def seed_for(seed: int) -> int:
    """The seed a step uses; a planted nondeterministic workload overrides this."""
    return seed


def _build(
    target: str, size: Mapping[str, int], device: str, dtype: torch.dtype, seed: int
) -> tuple[Any, Any]:
    import torch
    from torch import nn

    b, s, d, h = size["batch"], size["seq"], size["dim"], size["heads"]
    if target == "mlp":
        model: Any = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))
        x = torch.randn(b, s, d)
    elif target == "block":
        from suite.workloads._block import build

        model = build("block", {"dim": d, "heads": h}, seed=seed).train()
        x = torch.randn(b, s, d)
    elif target == "scatter_add":

        class Scatter(nn.Module):
            """Rows gathered from a table (backward: index_add into its gradient) and summed into
            buckets (forward: index_add): float atomics on CUDA, in no fixed order."""

            def __init__(self) -> None:
                super().__init__()
                self.table = nn.Parameter(torch.randn(BUCKETS, d))
                self.register_buffer("index", torch.randint(0, BUCKETS, (b * s,)))

            def forward(self, x: torch.Tensor) -> torch.Tensor:
                index: torch.Tensor = self.index  # type: ignore[assignment]
                rows = self.table.index_select(0, index)
                mixed = x.reshape(b * s, d) * rows
                pooled = torch.zeros(BUCKETS, d, device=x.device, dtype=x.dtype)
                return pooled.index_add(0, index, mixed)

        model = Scatter()
        x = torch.randn(b, s, d)
    elif target in ("sdpa", "flex_attention"):
        import torch.nn.functional as F

        class Attention(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.qkv = nn.Linear(d, 3 * d)

            def forward(self, x: torch.Tensor) -> torch.Tensor:
                q, k, v = (
                    t.view(b, s, h, d // h).transpose(1, 2) for t in self.qkv(x).chunk(3, -1)
                )
                if target == "sdpa":
                    return F.scaled_dot_product_attention(q, k, v, is_causal=True)
                from torch.nn.attention.flex_attention import create_block_mask, flex_attention

                mask = create_block_mask(
                    lambda _b, _h, qi, ki: qi >= ki, None, None, s, s, device=device
                )
                out: torch.Tensor = flex_attention(q, k, v, block_mask=mask)
                return out

        model = Attention()
        x = torch.randn(b, s, d)
    else:
        raise ValueError(f"unknown target {target!r}")
    return model.to(device=device, dtype=dtype), x.to(device=device, dtype=dtype).requires_grad_(
        True
    )


def step(
    target: str, size: Mapping[str, int], device: str, dtype_name: str, seed: int
) -> dict[str, torch.Tensor]:
    """Seeded model and inputs, forward and backward; every tensor that should be reproducible."""
    import torch

    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp64": torch.float64}[dtype_name]
    actual = seed_for(seed)
    torch.manual_seed(actual)
    model, x = _build(target, size, device, dtype, actual)
    out = model(x)
    out.float().square().mean().backward()
    tensors = {"output": out.detach().cpu(), "grad_input": x.grad.detach().cpu()}
    for name, param in model.named_parameters():
        if param.grad is not None:
            tensors[f"grad_{name}"] = param.grad.detach().cpu()
    return tensors


def first_difference(
    a: Mapping[str, torch.Tensor], b: Mapping[str, torch.Tensor]
) -> tuple[str | None, float]:
    """The first tensor (in a's order) that differs bitwise, and its max absolute difference."""
    import torch

    for name, left in a.items():
        right = b.get(name)
        if right is None or right.shape != left.shape or right.dtype != left.dtype:
            return name, float("inf")
        if not torch.equal(left.view(torch.uint8), right.view(torch.uint8)):
            return name, float((left.double() - right.double()).abs().max())
    missing = [n for n in b if n not in a]
    return (missing[0], float("inf")) if missing else (None, 0.0)


class Determinism(Workload):
    name = "determinism"
    description = (
        "bitwise reproducibility of a seeded forward and backward, in and across processes"
    )
    params = (
        Param(
            "target",
            ("mlp", "block", "sdpa", "flex_attention", "scatter_add"),
            ("mlp", "block", "flex_attention"),
        ),
        Param("dtype", ("fp32", "bf16"), ("fp32",)),
        Param(
            "algorithms",
            ALGORITHMS,
            ("deterministic",),
            help="torch.use_deterministic_algorithms on, or torch's default (off)",
        ),
    )
    sizes = SIZES
    throughput_unit = "steps/s"

    def size_tag(self, params: Mapping[str, Any], profile: str) -> str:
        return f"s{SIZES[profile]['seq']}"

    def run(self, ctx: CellContext) -> None:

        target, dtype = str(ctx.params["target"]), str(ctx.params["dtype"])
        deterministic = ctx.params.get("algorithms", "deterministic") == "deterministic"
        _set_algorithms(deterministic)
        device = str(ctx.device)
        size = dict(ctx.size)
        try:
            first = step(target, size, device, dtype, 0)
        except RuntimeError as exc:
            if deterministic and "deterministic implementation" in str(exc):
                raise Unsupported(f"no deterministic kernel on {device}: {exc}") from exc
            raise
        ctx.measure(lambda: step(target, size, device, dtype, 0), items_per_iter=1, unit="steps/s")
        again = step(target, size, device, dtype, 0)
        name_in, diff_in = first_difference(first, again)
        other = self.second_process(target, size, device, dtype, ctx.scratch, deterministic)
        name_x, diff_x = first_difference(first, other)
        ctx.metric("deterministic_in_process", name_in is None)
        ctx.metric("deterministic_cross_process", name_x is None)
        ctx.metric("first_difference", name_x or name_in or "")
        ctx.metric("max_difference", max(diff_in, diff_x))
        ctx.metric("tensors_compared", len(first))
        ctx.metric("deterministic_algorithms", deterministic)
        ctx.save_outputs(first)

    def second_process(
        self,
        target: str,
        size: Mapping[str, int],
        device: str,
        dtype: str,
        scratch: Path,
        deterministic: bool = True,
    ) -> dict[str, torch.Tensor]:
        import torch

        out = scratch / "second.pt"
        module = type(self).__module__
        argv = [
            sys.executable,
            "-c",
            f"import sys; from {module} import main; sys.exit(main(sys.argv[1:]))",
            "--target",
            target,
            "--device",
            device,
            "--dtype",
            dtype,
            "--out",
            str(out),
            "--algorithms",
            "deterministic" if deterministic else "default",
            *[f"--{k}={v}" for k, v in size.items()],
        ]
        proc = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            timeout=SECOND_PROCESS_TIMEOUT_S,
            check=False,
            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        )
        if proc.returncode != 0:
            raise RuntimeError(
                f"the second process failed ({proc.returncode}): {proc.stderr[-2000:]}"
            )
        loaded: dict[str, torch.Tensor] = torch.load(out, weights_only=True)
        return loaded


def main(argv: list[str]) -> int:
    """Entry of the second process: the same step, saved to a file."""
    import torch

    parser = argparse.ArgumentParser()
    parser.add_argument("--target", required=True)
    parser.add_argument("--device", required=True)
    parser.add_argument("--dtype", required=True)
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--algorithms", choices=ALGORITHMS, default="deterministic")
    for key in SIZES["smoke"]:
        parser.add_argument(f"--{key}", type=int, required=True)
    args = parser.parse_args(argv)
    _set_algorithms(args.algorithms == "deterministic")
    size = {k: getattr(args, k) for k in SIZES["smoke"]}
    tmp = Path(tempfile.mkdtemp(dir=args.out.parent))
    torch.save(step(args.target, size, args.device, args.dtype, 0), tmp / "t.pt")
    os.replace(tmp / "t.pt", args.out)
    tmp.rmdir()
    return 0
