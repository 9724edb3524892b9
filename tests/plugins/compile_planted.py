"""Planted compile and export workloads: each carries one deliberate defect to be detected."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from suite.workloads import Param, _block
from suite.workloads.compile import Compile
from suite.workloads.export import Export

if TYPE_CHECKING:
    import torch
    from torch import nn


def _wrapped(inner: nn.Module, defect: str) -> nn.Module:
    import torch
    from torch import nn

    class Defective(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            h: torch.Tensor = self.inner(x)
            if defect == "graph_break":
                torch._dynamo.graph_break()
                return h * 2
            # Control flow on a tensor's value: torch.export cannot trace it with fake tensors.
            if h.sum() > 0:
                return h * 2
            return h - 1

    return Defective()


class GraphBreakCompile(Compile):
    """The block with torch._dynamo.graph_break() in its forward."""

    name = "compile_graph_break"
    params = (
        Param("model", ("block",), ("block",)),
        Param("dynamic", ("mark_dynamic",), ("mark_dynamic",)),
    )
    # Two lengths keep the cell short; the graph break is what this plant is about.
    sizes = {
        "smoke": {**Compile.sizes["smoke"], "seqs": (32, 64), "measure_seq": 64},
        "full": Compile.sizes["full"],
    }

    def build_model(
        self, kind: str, size: Mapping[str, Any], device: torch.device | str
    ) -> nn.Module:
        return _wrapped(_block.build(kind, size, device=device), "graph_break")


class DataDependentExport(Export):
    """The block followed by an if on a tensor value, which torch.export rejects."""

    name = "export_data_dependent"
    params = (
        Param("path", ("torch_export",), ("torch_export",)),
        Param("model", ("block",), ("block",)),
    )

    def build_model(
        self, kind: str, size: Mapping[str, Any], device: torch.device | str
    ) -> nn.Module:
        return _wrapped(_block.build(kind, size, device=device), "data_dependent")
