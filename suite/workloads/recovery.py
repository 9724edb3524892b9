"""The recovery workload: FSDP2 training that loses a rank and resumes from its last sharded
checkpoint, as a job on a fleet does.

Trains the fsdp2 workload's model, saving model and AdamW state with DCP every
``checkpoint_every`` steps into the cell's durable folder (ctx.durable, which outlives a restart
of the group). With ``fault=kill_rank`` the harness, not this workload, SIGKILLs rank 1 once
it has finished step ``kill_after`` (Workload.fault; ctx.step_done is where it may); torchrun
(--max-restarts 1) restarts the whole group, and the run after the restart loads the last
checkpoint and trains to the end. Its loss curve from the step it resumed at and its final
parameters must equal those of an uninterrupted run of the same training (correctness: on one
machine they are bit-identical). It records ``recovery_s``, from the kill to the end of the
first step after the resume (detection, the group's restart, imports, rendezvous, the load and
one step; the recovery gate compares it between pins), and ``steps_lost``, the steps trained
again. ``fault=none`` trains through with the same checkpoints.

Two planted bugs must fail: ``bug=drop_optimizer_state`` resumes with a fresh optimizer, and
``bug=resume_step_before`` resumes from the step before the checkpoint's (one batch twice).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from suite.workloads.base import CellContext, Fault, Param, ParamValue, Unsupported, Workload
from suite.workloads.checkpoint import (
    _fresh,
    _import_dcp,
    _load_state,
    _on_several_nodes,
    _require_numpy,
    _save_state,
)
from suite.workloads.fsdp2 import (
    WORLD_SIZE,
    fully_shard_fn,
    local_batch,
    make_data,
    timed_training,
    trainer,
)

if TYPE_CHECKING:
    import torch
    from torch import nn

SIZES: dict[str, dict[str, Any]] = {
    "smoke": {
        "dim": 256, "layers": 4, "batch": 32, "steps": 8, "checkpoint_every": 3,
        "kill_after": 5, "lr": 1e-2,
    },
    "full": {
        "dim": 4096, "layers": 4, "batch": 64, "steps": 20, "checkpoint_every": 5,
        "kill_after": 12, "lr": 1e-3,
    },
}  # fmt: skip
KILLED_RANK = 1  # never rank 0, which writes the record
LATEST = "latest"  # the last complete checkpoint's step, written after every rank saved


def _latest(folder: Path) -> int | None:
    try:
        return int((folder / LATEST).read_text(encoding="utf-8").strip())
    except (OSError, ValueError):
        return None


def _checkpoint(
    ctx: CellContext, model: nn.Module, optimizer: torch.optim.Optimizer, folder: Path, step: int
) -> None:
    """Save at STEP; once every rank has saved, rank 0 marks it the latest (atomically)."""
    import torch.distributed as dist

    _save_state(model, optimizer, folder / f"step{step}")
    dist.barrier()
    if ctx.rank == 0:
        partial = folder / f".{LATEST}.tmp"
        partial.write_text(f"{step}\n", encoding="utf-8")
        partial.replace(folder / LATEST)
    dist.barrier()


def _parameters(model: nn.Module) -> torch.Tensor:
    """Every parameter in full (a collective over the shards), flattened into one tensor."""
    import torch

    full = [p.full_tensor() if hasattr(p, "full_tensor") else p for p in model.parameters()]
    return torch.cat([t.detach().flatten().cpu() for t in full])


class Recovery(Workload):
    name = "recovery"
    description = (
        "FSDP2 training with a rank SIGKILLed: the group restarts and resumes from its sharded "
        "DCP checkpoint; the result equals uninterrupted training; recovery time"
    )
    params = (
        Param("fault", ("kill_rank", "none"), ("kill_rank",), help="the harness kills rank 1"),
        Param(
            "bug",
            ("none", "drop_optimizer_state", "resume_step_before"),
            ("none",),
            help="planted bugs in the resume (each must fail)",
        ),
    )
    sizes = SIZES
    throughput_unit = "samples/s"
    distributed = True

    def ranks(self, params: Mapping[str, ParamValue], profile: str) -> int:
        return WORLD_SIZE

    def size_tag(self, params: Mapping[str, ParamValue], profile: str) -> str | None:
        return f"d{SIZES[profile]['dim']}"

    def skip_reason(self, params: Mapping[str, ParamValue]) -> str | None:
        if params.get("fault") == "none" and params.get("bug") != "none":
            return "the planted bugs are in the resume, which a run without a fault never does"
        return None

    def fault(self, params: Mapping[str, ParamValue], profile: str) -> Fault | None:
        if params.get("fault") != "kill_rank":
            return None
        return Fault(rank=KILLED_RANK, step=int(SIZES[profile]["kill_after"]))

    def run(self, ctx: CellContext) -> None:
        import torch

        _import_dcp()
        fully_shard_fn()  # Unsupported before anything is built
        _require_numpy()
        if _on_several_nodes(ctx.world_size):
            raise Unsupported(
                "recovery is run on one node: the checkpoint must outlive the restart on every "
                "node, which needs a filesystem the nodes share"
            )
        size, rank, world = ctx.size, ctx.rank, ctx.world_size
        steps, every, bug = int(size["steps"]), int(size["checkpoint_every"]), ctx.params["bug"]
        folder = ctx.durable / "dcp"
        folder.mkdir(parents=True, exist_ok=True)
        xs, ys = make_data(size, world, ctx.device)
        x_local, y_local = local_batch(xs, rank, world), local_batch(ys, rank, world)

        model, optimizer = _fresh(size, ctx.device, seed=0)
        latest = _latest(folder) if ctx.attempt > 0 else None
        start = 0
        if latest is not None:
            _load_state(model, optimizer, folder / f"step{latest}", bug != "drop_optimizer_state")
            start = latest - 1 if bug == "resume_step_before" else latest
        elif ctx.attempt > 0:
            raise RuntimeError(f"restarted (attempt {ctx.attempt}) with no checkpoint in {folder}")
        train_step = trainer(model, optimizer, x_local, y_local, world)
        losses = []
        for i in range(start, steps):
            losses.append(train_step(i))
            if i == start and (killed := ctx.killed_at()) is not None:
                recovery_s = time.time() - killed
                ctx.metric("recovery_s", recovery_s, "s")
                ctx.rank_metric("recovery_s", recovery_s, "s")
            done = i + 1
            if done % every == 0 and done < steps:
                _checkpoint(ctx, model, optimizer, folder, done)
            ctx.step_done(done)
        resumed, params = torch.stack(losses), _parameters(model)

        whole_model, whole_optimizer = _fresh(size, ctx.device, seed=0)
        whole_step = trainer(whole_model, whole_optimizer, x_local, y_local, world)
        uninterrupted = torch.stack([whole_step(i) for i in range(steps)])
        whole_params = _parameters(whole_model)
        self._judge(ctx, resumed, uninterrupted[start:], params, whole_params)
        if latest is not None:  # the steps the killed group had finished and trained again
            fault = self.fault(ctx.params, ctx.profile)
            ctx.metric("steps_lost", (fault.step if fault else steps) - start)
        ctx.metric("resumed_at_step", start)
        ctx.metric("attempt", ctx.attempt)
        ctx.metric("steps", steps)

        timed_training(
            ctx, trainer(whole_model, whole_optimizer, x_local, y_local), steps, xs.shape[1]
        )

    @staticmethod
    def _judge(
        ctx: CellContext,
        resumed: torch.Tensor,
        uninterrupted: torch.Tensor,
        params: torch.Tensor,
        whole_params: torch.Tensor,
    ) -> None:
        """Rank 0 checks the resumed curve and final parameters against uninterrupted training
        (reference and truth alike: the allowed error is the fp32 tolerance alone)."""
        ctx.metric("resume_max_abs_diff", float((resumed - uninterrupted).abs().max()))
        ctx.metric("final_param_max_abs_diff", float((params - whole_params).abs().max()))
        ctx.metric("loss_after_n_steps", float(uninterrupted[-1]))
        if ctx.rank != 0:
            return
        for label, got, want in (
            ("resumed_loss_curve", resumed, uninterrupted),
            ("final_parameters", params, whole_params),
        ):
            ctx.check_accuracy(
                got,
                want,
                want.double(),
                reference_name="uninterrupted training",
                dtype="fp32",
                label=label,
            )
