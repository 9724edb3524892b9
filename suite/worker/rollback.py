"""The rollback gate: can we get back to the baseline once the candidate has run?

Three checks, run by `ab` after its rounds:
- checkpoint compatibility both ways: a torch.save state dict, a distributed checkpoint (DCP)
  of a trained model and its optimizer, and a sharded DCP checkpoint of FSDP2 training at world
  2 (two processes over gloo, as a job saves one), written by one pin, load in the other and
  continue identically (that is what a rollback needs, and the reverse what adoption needs);
- a rehearsal: the baseline runs its cells once more and must reproduce its own earlier results;
- the rollback duration: getting the baseline environment ready plus the rehearsal.

The write/read halves run in each side's interpreter (in its container for an image side):
`python -m suite.worker.rollback write --into DIR`, `... read --from DIR --report FILE`.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

from suite.core.accuracy import CHECKPOINT_TOLERANCE

if TYPE_CHECKING:
    import torch

CHECKPOINT_FORMATS = ("torch_save", "dcp", "dcp_fsdp2")
SHARDED_WORLD = 2


def _model_and_optimizer() -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    import torch

    torch.manual_seed(1234)
    model = torch.nn.Sequential(
        torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64), torch.nn.ReLU(),
        torch.nn.Linear(64, 8),
    )  # fmt: skip
    return model, torch.optim.AdamW(model.parameters(), lr=1e-2)


def _batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
    import torch

    gen = torch.Generator().manual_seed(10_000 + step)
    return torch.randn(16, 32, generator=gen), torch.randn(16, 8, generator=gen)


def _train(model: torch.nn.Module, opt: torch.optim.Optimizer, steps: range) -> list[float]:
    losses = []
    for step in steps:
        x, y = _batch(step)
        loss = (model(x) - y).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    return losses


def write(directory: Path, sharded: bool = False) -> dict[str, Any]:
    """Train 3 steps, save both formats, and the expected continuation (3 more steps)."""
    import torch
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict

    directory.mkdir(parents=True, exist_ok=True)
    model, opt = _model_and_optimizer()
    _train(model, opt, range(3))
    torch.save(
        {"model": model.state_dict(), "optim": opt.state_dict()}, directory / "state_dict.pt"
    )
    model_sd, optim_sd = get_state_dict(model, opt)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # single-process DCP warns that no process group exists
        dcp.save({"model": model_sd, "optim": optim_sd}, checkpoint_id=str(directory / "dcp"))  # type: ignore[attr-defined]
    expected = _train(model, opt, range(3, 6))
    if sharded:
        try:
            sharded_world("write", directory)
        except Exception as exc:  # the other formats stand; the reader reports this one failing
            (directory / "dcp_fsdp2.error").write_text(f"{type(exc).__name__}: {exc}"[:1500])
    meta = {"torch": torch.__version__, "continuation": expected}
    (directory / "meta.json").write_text(json.dumps(meta), encoding="utf-8")
    return meta


def _load(fmt: str, directory: Path) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    import torch
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    model, opt = _model_and_optimizer()
    if fmt == "torch_save":
        state = torch.load(directory / "state_dict.pt", weights_only=True)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optim"])
    else:
        _train(model, opt, range(1))  # materialise optimizer state for DCP to load into
        model_sd, optim_sd = get_state_dict(model, opt)
        state = {"model": model_sd, "optim": optim_sd}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            dcp.load(state, checkpoint_id=str(directory / "dcp"))  # type: ignore[attr-defined]
        set_state_dict(model, opt, model_state_dict=state["model"], optim_state_dict=state["optim"])
    return model, opt


def _sharded_rank(rank: int, action: str, directory: Path, port: int, out: Path) -> None:
    """One rank of the sharded check: FSDP2 over gloo, every Linear and the root sharded. Write:
    train 3 steps, save with DCP. Read: load that into a fresh model and optimizer. Both then
    train 3 more steps; rank 0 writes the losses to OUT (every rank trains on the same batches,
    so the averaged gradients and the losses are those of one process)."""
    import datetime
    import os

    import torch
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    os.environ.update({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)})
    dist.init_process_group(
        "gloo", rank=rank, world_size=SHARDED_WORLD, timeout=datetime.timedelta(seconds=300)
    )
    from suite.workloads.fsdp2 import fully_shard_fn

    fully_shard = fully_shard_fn()
    try:
        model, _ = _model_and_optimizer()
        for layer in model.children():
            if isinstance(layer, torch.nn.Linear):
                fully_shard(layer)
        fully_shard(model)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2)  # over the sharded parameters
        checkpoint = str(directory / "dcp_fsdp2")
        if action == "write":
            _train(model, opt, range(3))
            model_sd, optim_sd = get_state_dict(model, opt)
            dcp.save({"model": model_sd, "optim": optim_sd}, checkpoint_id=checkpoint)  # type: ignore[attr-defined]
        else:
            model_sd, optim_sd = get_state_dict(model, opt)
            state: dict[str, Any] = {"model": model_sd, "optim": optim_sd}
            dcp.load(state, checkpoint_id=checkpoint)  # type: ignore[attr-defined]
            set_state_dict(
                model, opt, model_state_dict=state["model"], optim_state_dict=state["optim"]
            )
        losses = _train(model, opt, range(3, 6))
        if rank == 0:
            out.write_text(json.dumps(losses), encoding="utf-8")
    finally:
        dist.destroy_process_group()


def sharded_world(action: str, directory: Path) -> list[float]:
    """Run _sharded_rank in SHARDED_WORLD fresh processes; the continued losses."""
    import socket

    import torch.multiprocessing as mp

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = int(probe.getsockname()[1])
    # The reader's folder is the writer's, read-only in a container: the losses go elsewhere.
    with tempfile.TemporaryDirectory(prefix="torch-matrix-rollback-") as scratch:
        out = Path(scratch) / "losses.json"
        mp.start_processes(  # type: ignore[attr-defined,no-untyped-call,unused-ignore]
            _sharded_rank, args=(action, directory, port, out), nprocs=SHARDED_WORLD,
            start_method="spawn",
        )  # fmt: skip
        losses: list[float] = json.loads(out.read_text(encoding="utf-8"))
    if action == "write":
        (directory / "dcp_fsdp2.json").write_text(json.dumps(losses), encoding="utf-8")
    return losses


def read(directory: Path, sharded: bool = False) -> dict[str, Any]:
    """Load each format written by the other pin and continue; compare with its continuation."""
    import torch

    meta = json.loads((directory / "meta.json").read_text("utf-8"))
    report: dict[str, Any] = {
        "torch": torch.__version__,
        "written_by": meta["torch"],
        "formats": {},
    }
    for fmt in CHECKPOINT_FORMATS if sharded else CHECKPOINT_FORMATS[:2]:
        try:
            if fmt == "dcp_fsdp2":
                got = sharded_world("read", directory)
            else:
                model, opt = _load(fmt, directory)
                got = _train(model, opt, range(3, 6))
            expected = meta["continuation"]
            if fmt == "dcp_fsdp2":  # the writer's own sharded continuation
                expected = json.loads((directory / "dcp_fsdp2.json").read_text("utf-8"))
            diff = max(abs(a - b) / max(abs(b), 1e-12) for a, b in zip(got, expected, strict=True))
            ok = diff <= CHECKPOINT_TOLERANCE
            report["formats"][fmt] = {
                "ok": ok,
                "max_rel_diff": diff,
                "error": None if ok else "the continued loss differs",
            }
        except Exception as exc:  # an incompatible checkpoint is the finding, not a crash
            report["formats"][fmt] = {
                "ok": False,
                "max_rel_diff": None,
                "error": f"{type(exc).__name__}: {str(exc)[:1500]}",
            }
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m suite.worker.rollback")
    sub = parser.add_subparsers(dest="action", required=True)
    # The flags name what each half reads and writes, so a container gets exactly those mounted
    # (suite/execute/mounts.py: mounts_for).
    writer = sub.add_parser("write", help="train, save both formats and the continuation")
    writer.add_argument("--into", type=Path, required=True, help="the checkpoint folder")
    reader = sub.add_parser("read", help="load the other pin's checkpoint and continue")
    reader.add_argument("--from", dest="source", type=Path, required=True)
    reader.add_argument("--report", type=Path, required=True, help="the JSON report to write")
    for half in (writer, reader):
        half.add_argument("--sharded", action="store_true", help="also FSDP2 at world 2")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    if args.action == "write":
        write(args.into, args.sharded)
        return 0
    report = read(args.source, args.sharded)
    report["seconds"] = time.perf_counter() - start
    args.report.write_text(json.dumps(report, indent=2), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
