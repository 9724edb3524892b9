"""The rollback gate: can we get back to the baseline once the candidate has run?

Three checks, run by `ab` after its rounds:
- checkpoint compatibility both ways: a torch.save state dict and a distributed checkpoint (DCP)
  of a trained model and its optimizer, written by one pin, load in the other and continue
  identically (that is what a rollback needs, and the reverse what adoption needs);
- a rehearsal: the baseline runs its cells once more and must reproduce its own earlier results;
- the rollback duration: getting the baseline environment ready plus the rehearsal.

The write/read halves run in each side's interpreter (in its container for an image side):
`python -m suite.worker.rollback write --into DIR`, `... read --from DIR --report FILE`.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

from suite.core.accuracy import CHECKPOINT_TOLERANCE

if TYPE_CHECKING:
    import torch

CHECKPOINT_FORMATS = ("torch_save", "dcp")


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


def write(directory: Path) -> dict[str, Any]:
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


def read(directory: Path) -> dict[str, Any]:
    """Load each format written by the other pin and continue; compare with its continuation."""
    import torch

    meta = json.loads((directory / "meta.json").read_text("utf-8"))
    report: dict[str, Any] = {
        "torch": torch.__version__,
        "written_by": meta["torch"],
        "formats": {},
    }
    for fmt in CHECKPOINT_FORMATS:
        try:
            model, opt = _load(fmt, directory)
            got = _train(model, opt, range(3, 6))
            diff = max(
                abs(a - b) / max(abs(b), 1e-12)
                for a, b in zip(got, meta["continuation"], strict=True)
            )
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
    # (suite/execute/docker.py: mounts_for).
    writer = sub.add_parser("write", help="train, save both formats and the continuation")
    writer.add_argument("--into", type=Path, required=True, help="the checkpoint folder")
    reader = sub.add_parser("read", help="load the other pin's checkpoint and continue")
    reader.add_argument("--from", dest="source", type=Path, required=True)
    reader.add_argument("--report", type=Path, required=True, help="the JSON report to write")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    if args.action == "write":
        write(args.into)
        return 0
    report = read(args.source)
    report["seconds"] = time.perf_counter() - start
    args.report.write_text(json.dumps(report, indent=2), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
