"""The checkpoint workload: FSDP2 training resumed from a torch.distributed.checkpoint (DCP).

Trains the fsdp2 workload's model ``resume_at`` steps, saves model and AdamW state with DCP
(get_state_dict / set_state_dict), loads them into a freshly built model and optimizer, trains
on, and compares that loss curve with an uninterrupted run of the same length. Resuming must
reproduce it: the uninterrupted curve is both reference and truth, so the allowed RMSE is the
fp32 tolerance alone (on one machine the curves are bit-identical). Rank 0 checks; the curves
are the same on every rank (each is the mean over ranks). ``drop_optimizer_state=true`` plants
a bug, resuming with a fresh optimizer, and must fail that check.

ctx.measure times a DCP round trip (save, then load back into the same model and optimizer),
which is what this workload is about; fsdp2 times the training step. ``save_s``/``load_s`` are
the medians of its two halves over the steady calls. The checkpoint lives in rank 0's scratch
folder, whose path is broadcast (scratch is per process). On several nodes with no shared
filesystem ($TORCH_MATRIX_CHECKPOINT_DIR may name a shared one), each node's files are handed
to the others after every save, untimed in save_s and load_s but inside the round trip: what a
shared filesystem would hold, and no rank reads another node's disk.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from suite.workloads.base import CellContext, Param, ParamValue, Skip, Workload
from suite.workloads.collectives import measure_in_lockstep
from suite.workloads.fsdp2 import (
    WORLD_SIZE,
    build_model,
    fully_shard_fn,
    local_batch,
    local_bytes,
    make_data,
    shard,
    train,
    trainer,
)

if TYPE_CHECKING:
    import torch
    from torch import nn

SIZES: dict[str, dict[str, Any]] = {
    "smoke": {"dim": 256, "layers": 4, "batch": 32, "steps": 8, "resume_at": 4, "lr": 1e-2},
    "full": {"dim": 4096, "layers": 4, "batch": 64, "steps": 20, "resume_at": 10, "lr": 1e-3},
}
CHECKPOINT_DIR_VAR = "TORCH_MATRIX_CHECKPOINT_DIR"


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[len(ordered) // 2]


def _shared_dir(ctx: CellContext) -> tuple[Path, bool]:
    """(a folder every rank uses, whether each node's local rank 0 must remove it), chosen by
    rank 0."""
    import torch.distributed as dist

    base = os.environ.get(CHECKPOINT_DIR_VAR)
    chosen: list[Any] = [None]
    if ctx.rank == 0:
        chosen[0] = tempfile.mkdtemp(prefix="torch-matrix-dcp-", dir=base or ctx.scratch)
    dist.broadcast_object_list(chosen, src=0)
    folder = Path(str(chosen[0]))
    folder.mkdir(parents=True, exist_ok=True)  # on another node: a folder of its own
    # Scratch is removed with rank 0's context; a copy on another node, or in the given
    # folder, by each node's local rank 0.
    return folder, bool(base) or _on_several_nodes(ctx.world_size)


def _local_rank() -> int:
    return int(os.environ.get("LOCAL_RANK", "0"))


def _on_several_nodes(world: int) -> bool:
    return int(os.environ.get("LOCAL_WORLD_SIZE", str(world))) < world


def _clear(folder: Path, world: int) -> None:
    """Before a save on several nodes: no node keeps the copies of the last one, so that what
    each node holds after the save is its own and _share adds the rest."""
    import torch.distributed as dist

    if not _on_several_nodes(world):
        return
    if _local_rank() == 0:
        shutil.rmtree(folder, ignore_errors=True)
    dist.barrier()


def _share(folder: Path, world: int) -> None:
    """Give every node every file of FOLDER that another node wrote, through a collective:
    a checkpoint saved across nodes without a shared filesystem, as one would hold it. Each
    node's local rank 0 offers its node's files and writes those it lacks."""
    import torch.distributed as dist

    if not _on_several_nodes(world):
        return
    dist.barrier()  # every rank of this node has written its files
    mine: dict[str, bytes] = {}
    if _local_rank() == 0:
        for path in sorted(p for p in folder.rglob("*") if p.is_file()):
            mine[str(path.relative_to(folder))] = path.read_bytes()
    offered: list[Any] = [None] * world
    dist.all_gather_object(offered, mine)
    if _local_rank() == 0:
        for files in offered:
            for name, data in (files or {}).items():
                target = folder / name
                if not target.exists():
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.write_bytes(data)
    dist.barrier()  # no rank loads before its node holds every file


def _import_dcp() -> None:
    """Import the DCP API that _save_state and _load_state use, before anything runs: a torch
    without it leaves the cell unsupported on every rank before any collective or training."""
    from torch.distributed.checkpoint.state_dict import (  # noqa: F401
        get_model_state_dict,
        get_state_dict,
        set_model_state_dict,
        set_state_dict,
    )
    from torch.distributed.checkpoint.state_dict_loader import load  # noqa: F401
    from torch.distributed.checkpoint.state_dict_saver import save  # noqa: F401


def _require_numpy() -> None:
    # Checked on every rank before any collective: one rank failing alone would leave the
    # others blocked in their next collective until the process group times out.
    if importlib.util.find_spec("numpy") is None:
        raise Skip(
            "numpy is not installed: DCP exchanges its plans with torch.distributed object "
            "collectives, which unpickle through numpy (pip install numpy)"
        )


def _fresh(
    size: Mapping[str, Any], device: torch.device, seed: int
) -> tuple[nn.Module, torch.optim.Optimizer]:
    """The fsdp2 model built from SEED and sharded, with a new AdamW."""
    import torch

    model = shard(build_model(size, seed), device)
    return model, torch.optim.AdamW(model.parameters(), lr=float(size["lr"]))


def _save_state(
    model: nn.Module, optimizer: torch.optim.Optimizer, checkpoint: Path, group: Any = None
) -> None:
    """Save model and optimizer state with DCP, over GROUP's ranks (the default group's)."""
    from torch.distributed.checkpoint.state_dict import get_state_dict
    from torch.distributed.checkpoint.state_dict_saver import save

    model_sd, optim_sd = get_state_dict(model, optimizer)
    save({"model": model_sd, "optim": optim_sd}, checkpoint_id=checkpoint, process_group=group)


def _load_state(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    checkpoint: Path,
    optimizer_too: bool = True,
    group: Any = None,
) -> None:
    """Load the checkpoint into MODEL, and into OPTIMIZER unless the planted bug drops it,
    over GROUP's ranks (the default group's)."""
    from torch.distributed.checkpoint.state_dict import (
        get_model_state_dict,
        get_state_dict,
        set_model_state_dict,
        set_state_dict,
    )
    from torch.distributed.checkpoint.state_dict_loader import load

    state: dict[str, Any]
    if not optimizer_too:
        state = {"model": get_model_state_dict(model)}
        load(state, checkpoint_id=checkpoint, process_group=group)
        set_model_state_dict(model, state["model"])
        return
    model_sd, optim_sd = get_state_dict(model, optimizer)
    state = {"model": model_sd, "optim": optim_sd}
    load(state, checkpoint_id=checkpoint, process_group=group)
    set_state_dict(
        model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"]
    )


def _judge_resume(
    ctx: CellContext,
    resumed: torch.Tensor,
    uninterrupted: torch.Tensor,
    steps: int,
    resume_at: int,
) -> None:
    """Record the curves' metrics; rank 0 checks the resumed curve against the other."""
    max_diff = float((resumed - uninterrupted).abs().max())
    ctx.metric("resume_max_abs_diff", max_diff)
    ctx.metric("loss_after_n_steps", float(uninterrupted[-1]))
    ctx.metric("steps", steps)
    ctx.metric("resume_at", resume_at)
    if ctx.rank == 0:
        equivalent = ctx.check_accuracy(
            resumed,
            uninterrupted,
            uninterrupted.double(),
            reference_name="uninterrupted training",
            dtype="fp32",
            label="resumed_loss_curve",
        )
        ctx.metric("resume_equivalent", equivalent)


class Checkpoint(Workload):
    name = "checkpoint"
    description = "FSDP2 + DCP: save/load time, and training resumed from a checkpoint is exact"
    params = (
        Param(
            "drop_optimizer_state",
            (False, True),
            (False,),
            help="planted bug: resume without the optimizer state (must fail)",
        ),
    )
    sizes = SIZES
    throughput_unit = "bytes/s"

    distributed = True

    def ranks(self, params: Mapping[str, ParamValue], profile: str) -> int:
        return WORLD_SIZE

    def size_tag(self, params: Mapping[str, ParamValue], profile: str) -> str | None:
        return f"d{SIZES[profile]['dim']}"

    def run(self, ctx: CellContext) -> None:
        import torch.distributed as dist

        _import_dcp()
        size, rank, world = ctx.size, ctx.rank, ctx.world_size
        steps, resume_at = int(size["steps"]), int(size["resume_at"])
        drop = bool(ctx.params["drop_optimizer_state"])
        fully_shard_fn()  # Unsupported before anything is built
        _require_numpy()
        xs, ys = make_data(size, world, ctx.device)
        x_local, y_local = local_batch(xs, rank, world), local_batch(ys, rank, world)

        def curve(model: nn.Module, optimizer: torch.optim.Optimizer, at: range) -> torch.Tensor:
            return train(trainer(model, optimizer, x_local, y_local, world), at)

        folder, remove = _shared_dir(ctx)
        try:
            model, optimizer = _fresh(size, ctx.device, seed=0)
            curve(model, optimizer, range(resume_at))
            _save_state(model, optimizer, folder / "resume")
            _share(folder / "resume", world)

            # Other initial weights than the saved run's, so that a load that does nothing shows.
            resumed_model, resumed_optimizer = _fresh(size, ctx.device, seed=1)
            _load_state(resumed_model, resumed_optimizer, folder / "resume", optimizer_too=not drop)
            resumed = curve(resumed_model, resumed_optimizer, range(resume_at, steps))

            whole_model, whole_optimizer = _fresh(size, ctx.device, seed=0)
            uninterrupted = curve(whole_model, whole_optimizer, range(steps))[resume_at:]

            self._measure(ctx, model, optimizer, folder / "measured")
            dist.barrier()  # no rank still reads the folder when it is removed
        finally:
            if remove and _local_rank() == 0:
                shutil.rmtree(folder, ignore_errors=True)
        _judge_resume(ctx, resumed, uninterrupted, steps, resume_at)

    def _measure(
        self, ctx: CellContext, model: nn.Module, optimizer: torch.optim.Optimizer, path: Path
    ) -> None:
        """ctx.measure a save + load round trip; record each half's median and the bytes."""
        import torch
        import torch.distributed as dist
        from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
        from torch.distributed.checkpoint.state_dict_loader import load
        from torch.distributed.checkpoint.state_dict_saver import save

        saves: list[float] = []
        loads: list[float] = []

        def round_trip() -> None:
            model_sd, optim_sd = get_state_dict(model, optimizer)
            state: dict[str, Any] = {"model": model_sd, "optim": optim_sd}
            _clear(path, ctx.world_size)
            start = time.perf_counter()
            save(state, checkpoint_id=path)
            ctx.backend.sync()
            saved = time.perf_counter()
            _share(path, ctx.world_size)
            loading = time.perf_counter()
            load(state, checkpoint_id=path)
            set_state_dict(
                model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"]
            )
            ctx.backend.sync()
            saves.append(saved - start)
            loads.append(time.perf_counter() - loading)

        tensors: list[torch.Tensor] = list(model.parameters())
        for per_param in optimizer.state.values():
            tensors += [v for v in per_param.values() if isinstance(v, torch.Tensor)]
        total = torch.tensor([local_bytes(tensors)], dtype=torch.float64, device=ctx.device)
        dist.all_reduce(total)
        measure_in_lockstep(ctx, round_trip, items_per_iter=float(total[0]), unit="bytes/s")
        steady = slice(1, None) if len(saves) > 1 else slice(None)  # the first call is cold
        ctx.metric("save_s", _median(saves[steady]), "s")
        ctx.metric("load_s", _median(loads[steady]), "s")
        ctx.metric("checkpoint_bytes", float(total[0]), "B")
        ctx.rank_metric("save_s", _median(saves[steady]), "s")
        ctx.rank_metric("load_s", _median(loads[steady]), "s")
