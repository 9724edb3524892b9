"""The reshard workload: a sharded DCP checkpoint loaded at other world sizes, as a job resumed
on another allocation loads it.

In a world of 4 ranks: ranks 0 and 1 train the fsdp2 workload's model under FSDP2 on a mesh of
their own (world 2) and save model and AdamW state with DCP; all 4 ranks load it into a fresh
model and optimizer (2 -> 4) and save again; ranks 0 and 1 load that (4 -> 2); rank 0 alone loads
it into an unsharded model with no process group (4 -> 1). Each loaded state, gathered in full,
must equal the state that was first saved (correctness, exact: the fp32 tolerance alone).
``bug=drop_shard`` plants a resharding bug: the last rank's shard of the first parameter is lost
(zeroed) after the 2 -> 4 load, and every check after it must fail. ctx.measure times the
resharded 2 -> 4 load on every rank. On several nodes each save is handed to every node through
a collective, as the checkpoint workload's are: no filesystem is assumed shared.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from suite.workloads.base import CellContext, Param, ParamValue, Unsupported, Workload
from suite.workloads.checkpoint import (
    _import_dcp,
    _load_state,
    _local_rank,
    _require_numpy,
    _save_state,
    _share,
    _shared_dir,
)
from suite.workloads.collectives import measure_in_lockstep
from suite.workloads.fsdp2 import build_model, fully_shard_fn, local_batch, make_data, trainer

if TYPE_CHECKING:
    import torch
    from torch import nn

SIZES: dict[str, dict[str, Any]] = {
    "smoke": {"dim": 256, "layers": 4, "batch": 32, "steps": 3, "lr": 1e-2},
    "full": {"dim": 4096, "layers": 4, "batch": 64, "steps": 3, "lr": 1e-3},
}
WORLD = 4
SAVED_AT = 2  # ranks 0 .. SAVED_AT - 1 train and save first


def _sharded(size: Mapping[str, Any], mesh: Any, seed: int) -> tuple[nn.Module, Any]:
    """The fsdp2 model built from SEED, each Linear and the root sharded over MESH, with AdamW."""
    import torch
    from torch import nn

    fully_shard = fully_shard_fn()
    model = build_model(size, seed)
    for layer in model:
        if isinstance(layer, nn.Linear):
            fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model, torch.optim.AdamW(model.parameters(), lr=float(size["lr"]))


def _full(tensor: Any) -> torch.Tensor:
    full: torch.Tensor = tensor.full_tensor() if hasattr(tensor, "full_tensor") else tensor
    return full.detach().cpu()


def _state(model: nn.Module, optimizer: Any | None) -> list[torch.Tensor]:
    """The model's and (where given) the optimizer's state in full, in a fixed order; a
    collective over the mesh the model is sharded on."""
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, get_state_dict

    model_sd: dict[str, Any]
    optim_sd: dict[str, Any] = {}
    if optimizer is None:
        model_sd = dict(get_model_state_dict(model))
    else:
        got = get_state_dict(model, optimizer)
        model_sd, optim_sd = dict(got[0]), dict(got[1])
    tensors = [_full(model_sd[k]).flatten().float() for k in sorted(model_sd)]
    per_param: dict[str, Any] = optim_sd.get("state", {})
    for name in sorted(per_param):
        for key, value in sorted(per_param[name].items()):
            if hasattr(value, "flatten") and key != "step":
                tensors.append(_full(value).flatten().float())
    return tensors


def _load_alone(size: Mapping[str, Any], path: Path) -> list[torch.Tensor]:
    """4 -> 1: an unsharded model in one process with no process group, as a user would
    inspect or serve a checkpoint."""
    import warnings

    from torch.distributed.checkpoint.state_dict_loader import load

    model = build_model(size, seed=2)
    state = {"model": model.state_dict()}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "assuming the intent is to load in a single process"
        load(state, checkpoint_id=path, no_dist=True)
    model.load_state_dict(state["model"])
    return _state(model, None)


def _lose_a_shard(model: nn.Module, rank: int, world: int) -> None:
    """The planted bug: the last rank's shard of the first parameter is zeroed."""
    import torch

    if rank == world - 1:
        first = next(iter(model.parameters()))
        with torch.no_grad():
            local = first.to_local() if hasattr(first, "to_local") else first
            local.zero_()


class Reshard(Workload):
    name = "reshard"
    description = "FSDP2 + DCP: a checkpoint saved at world 2 loads at 4, back at 2 and at 1"
    params = (
        Param(
            "bug",
            ("none", "drop_shard"),
            ("none",),
            help="planted bug: a rank's shard is lost after resharding (must fail)",
        ),
    )
    sizes = SIZES
    throughput_unit = "bytes/s"
    distributed = True

    def ranks(self, params: Mapping[str, ParamValue], profile: str) -> int:
        return WORLD

    def size_tag(self, params: Mapping[str, ParamValue], profile: str) -> str | None:
        return f"d{SIZES[profile]['dim']}"

    def run(self, ctx: CellContext) -> None:
        _import_dcp()
        fully_shard_fn()  # Unsupported before anything is built
        _require_numpy()
        if ctx.world_size != WORLD:
            raise Unsupported(f"reshard runs in a world of {WORLD} ranks, not {ctx.world_size}")
        folder, remove = _shared_dir(ctx)
        try:
            self._reshard(ctx, folder)
        finally:
            if remove and _local_rank() == 0:
                shutil.rmtree(folder, ignore_errors=True)

    def _reshard(self, ctx: CellContext, folder: Path) -> None:
        """2 -> 4 -> 2 -> 1. On several nodes, each save is handed to every node (as the
        checkpoint workload does): no filesystem is assumed shared."""
        import torch
        import torch.distributed as dist
        from torch.distributed.device_mesh import DeviceMesh, init_device_mesh

        rank, world, size = ctx.rank, ctx.world_size, ctx.size
        pair = dist.new_group(list(range(SAVED_AT)))  # every rank takes part in making it
        world_mesh = init_device_mesh(ctx.device.type, (world,))
        pair_mesh = DeviceMesh.from_group(pair, ctx.device.type) if rank < SAVED_AT else None

        saved: Sequence[torch.Tensor] | None = None
        if pair_mesh is not None:  # world 2 trains and saves
            model, optimizer = _sharded(size, pair_mesh, seed=0)
            xs, ys = make_data(size, SAVED_AT, ctx.device)
            # The loss is not needed: no all-reduce of it over the whole world, which the
            # other ranks never join (FSDP2 reduces the gradients over the pair's mesh).
            step = trainer(model, optimizer, local_batch(xs, rank, SAVED_AT),
                           local_batch(ys, rank, SAVED_AT))  # fmt: skip
            for i in range(int(size["steps"])):
                step(i)
            _save_state(model, optimizer, folder / "w2", pair)
            saved = _state(model, optimizer)
        _share(folder / "w2", world)
        shared: list[Any] = [saved]
        dist.broadcast_object_list(shared, src=0)
        original = torch.cat(list(shared[0]))

        model4, optimizer4 = _sharded(size, world_mesh, seed=1)
        _load_state(model4, optimizer4, folder / "w2")
        if ctx.params["bug"] == "drop_shard":
            _lose_a_shard(model4, rank, world)
        checks = {"2_to_4": torch.cat(_state(model4, optimizer4))}
        _save_state(model4, optimizer4, folder / "w4")
        _share(folder / "w4", world)
        dist.barrier()
        if pair_mesh is not None:  # 4 -> 2
            model2, optimizer2 = _sharded(size, pair_mesh, seed=3)
            _load_state(model2, optimizer2, folder / "w4", group=pair)
            checks["4_to_2"] = torch.cat(_state(model2, optimizer2))
        if rank == 0:  # 4 -> 1: the model alone (an optimizer needs the sharded run's state)
            checks["4_to_1"] = torch.cat(_load_alone(size, folder / "w4"))
        dist.barrier()
        self._judge(ctx, checks, original)
        self._measure(ctx, model4, optimizer4, folder / "w2")
        dist.barrier()  # no rank still reads the folder when it is removed

    @staticmethod
    def _judge(ctx: CellContext, checks: Mapping[str, torch.Tensor], original: Any) -> None:
        for name, got in checks.items():
            want = original[: got.numel()]  # the model's tensors come first
            if ctx.rank == 0:
                ctx.metric(f"reshard_{name}_max_abs_diff", float((got - want).abs().max()))
                ctx.check_accuracy(
                    got,
                    want,
                    want.double(),
                    reference_name="the state saved at world 2",
                    dtype="fp32",
                    label=f"reshard_{name}",
                )

    @staticmethod
    def _measure(ctx: CellContext, model: nn.Module, optimizer: Any, path: Path) -> None:
        """Time the resharded load (world 2's checkpoint into world 4) on every rank."""
        loads: list[float] = []

        def load() -> None:
            start = time.perf_counter()
            _load_state(model, optimizer, path)
            ctx.backend.sync()
            loads.append(time.perf_counter() - start)

        total = sum(
            p.numel() * p.element_size() for p in (_full(t) for t in model.state_dict().values())
        )
        measure_in_lockstep(ctx, load, items_per_iter=float(total), unit="bytes/s")
        ctx.metric("reshard_load_s", sorted(loads)[len(loads) // 2], "s")
