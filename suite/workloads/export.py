"""The export workload: can the transformer block leave eager PyTorch, and does it still agree?

Each cell takes one export path with a dynamic sequence dimension: ``torch.export`` (running
``ep.module()``), ONNX through ``torch.onnx.export(dynamo=True)`` run in onnxruntime, or
AOTInductor (``aoti_compile_and_package`` then ``aoti_load_package``). The exported artifact runs
at two sequence lengths, each compared with eager (``max_abs_error``); the first length is also
timed and checked against eager with a float64 eager run as truth. An export error is the
finding: it propagates, and the cell is recorded as failed with torch's message.
"""

from __future__ import annotations

import importlib.util
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from suite.workloads import _block
from suite.workloads.base import CellContext, Param, Skip, Unsupported, Workload

if TYPE_CHECKING:
    import torch
    from torch import nn

Runner = Callable[["torch.Tensor"], "torch.Tensor"]
Exporter = Callable[["nn.Module", "torch.Tensor", Mapping[str, Any], Path], Runner]

PATHS = ("torch_export", "onnx", "aoti")
ONNX_PACKAGES = ("onnx", "onnxscript", "onnxruntime")
SEQ_DIM = 1


def _dynamic_shapes(size: Mapping[str, Any]) -> tuple[dict[int, Any]]:
    """The sequence dimension of the one positional input, free within the size's bounds."""
    import torch

    seq = torch.export.Dim("seq", min=int(size["min_seq"]), max=int(size["max_seq"]))
    return ({SEQ_DIM: seq},)


def _torch_export(model: nn.Module, x: torch.Tensor, size: Mapping[str, Any], tmp: Path) -> Runner:
    import torch

    program = torch.export.export(model, (x,), dynamic_shapes=_dynamic_shapes(size))
    module = program.module()

    def run(inp: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = module(inp)
        return out

    return run


def _onnx(model: nn.Module, x: torch.Tensor, size: Mapping[str, Any], tmp: Path) -> Runner:
    import onnxruntime  # type: ignore[import-not-found, import-untyped, unused-ignore]
    import torch

    path = tmp / "model.onnx"
    torch.onnx.export(model, (x,), str(path), dynamo=True, dynamic_shapes=_dynamic_shapes(size))
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name

    def run(inp: torch.Tensor) -> torch.Tensor:
        return torch.from_numpy(session.run(None, {name: inp.detach().cpu().numpy()})[0])

    return run


def _aoti(model: nn.Module, x: torch.Tensor, size: Mapping[str, Any], tmp: Path) -> Runner:
    import torch
    import torch._inductor

    program = torch.export.export(model, (x,), dynamic_shapes=_dynamic_shapes(size))
    package = torch._inductor.aoti_compile_and_package(program, package_path=str(tmp / "model.pt2"))
    loaded = torch._inductor.aoti_load_package(package)

    def run(inp: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = loaded(inp)
        return out

    return run


EXPORTERS: dict[str, Exporter] = {"torch_export": _torch_export, "onnx": _onnx, "aoti": _aoti}


def _check_onnx_available(device: torch.device) -> None:
    if device.type != "cpu":
        raise Unsupported(
            f"the onnx path runs onnxruntime's CPUExecutionProvider only, not {device.type}"
        )
    missing = [name for name in ONNX_PACKAGES if importlib.util.find_spec(name) is None]
    if missing:
        raise Skip(
            "onnx export needs the optional extra: pip install 'torch-matrix[export]' "
            f"(missing: {', '.join(missing)})"
        )


class Export(_block.BlockModels, Workload):
    name = "export"
    description = (
        "torch.export, ONNX (onnxruntime) and AOTInductor export of a transformer block with a "
        "dynamic sequence length, run at two lengths against eager"
    )
    params = (
        Param("path", PATHS, PATHS, help="torch.export; ONNX via dynamo + onnxruntime; AOTI"),
        Param("model", ("block",), ("block",), help="the shared pre-norm transformer block"),
    )
    sizes = {
        "smoke": {
            "dim": 64,
            "heads": 4,
            "batch": 2,
            "seqs": (32, 48),
            "min_seq": 2,
            "max_seq": 256,
        },
        "full": {
            "dim": 1024,
            "heads": 16,
            "batch": 8,
            "seqs": (1024, 2048),
            "min_seq": 2,
            "max_seq": 8192,
        },
    }
    throughput_unit = "tokens/s"
    size_tag_format = "d{dim}"

    def run(self, ctx: CellContext) -> None:
        import torch

        path = str(ctx.params["path"])
        if path == "onnx":
            _check_onnx_available(ctx.device)
        ctx.seed(0)
        size = ctx.size
        model = self.build_model(str(ctx.params["model"]), size, ctx.device)
        seqs = [int(s) for s in size["seqs"]]
        inputs = [_block.make_input(size, s, device=ctx.device) for s in seqs]
        with torch.no_grad():
            eager = [model(x) for x in inputs]

        with tempfile.TemporaryDirectory(prefix="torch-matrix-export-") as tmp:
            start = time.perf_counter()
            runner = EXPORTERS[path](model, inputs[0], size, Path(tmp))
            # Through to a runnable artifact: export, plus compile and load for aoti and onnx.
            ctx.metric("export_s", time.perf_counter() - start, "s")

            def call(x: torch.Tensor) -> torch.Tensor:
                with torch.no_grad():
                    return runner(x)

            outputs = [call(x) for x in inputs]
            errors = [
                float((out.to(ref.device, ref.dtype) - ref).abs().max())
                for out, ref in zip(outputs, eager, strict=True)
            ]
            ctx.metric("max_abs_error", max(errors))
            ctx.metric("shapes_checked", len(outputs))
            ctx.metric("seq_lengths", ",".join(str(s) for s in seqs))

            first = inputs[0]
            ctx.measure(
                lambda: call(first),
                items_per_iter=int(size["batch"]) * seqs[0],
                unit=self.throughput_unit,
            )
        with torch.no_grad():
            truth = _block.fp64_copy(model)(first.detach().to("cpu", torch.float64))
        ctx.check_accuracy(
            outputs[0], eager[0], truth, reference_name="eager", label=f"{path}_output"
        )
