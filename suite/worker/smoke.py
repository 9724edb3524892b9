"""`python -m suite.worker.smoke`: can this interpreter run every kind of cell the matrix asks?

Run inside a freshly built image (suite/execute/image_build.py) before any cell: it compiles a
function with torch.compile (Inductor's C++ kernels need a working compiler and Python's
headers), exports one with AOTInductor and runs the compiled package, and, where a CUDA device is
present, runs a Triton kernel (Triton builds its launcher with a C compiler). Each check is
compared with eager.
Prints one JSON line {"checks": {name: {"ok": bool, "detail": str}}} and exits 1 when any failed.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import traceback
from collections.abc import Callable
from pathlib import Path


def _compile() -> str:
    import torch

    def f(x: torch.Tensor) -> torch.Tensor:
        return (x + 1).sin() * 2

    x = torch.randn(256)
    got = torch.compile(f)(x)
    torch.testing.assert_close(got, f(x))
    return "torch.compile (inductor) matches eager"


def _aoti(tmp: Path) -> str:
    import torch
    import torch._inductor

    class Model(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear = torch.nn.Linear(16, 8)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.relu(self.linear(x))

    model = Model().eval()
    x = torch.randn(4, 16)
    program = torch.export.export(model, (x,))
    package = torch._inductor.aoti_compile_and_package(program, package_path=str(tmp / "m.pt2"))
    loaded = torch._inductor.aoti_load_package(package)
    with torch.no_grad():
        torch.testing.assert_close(loaded(x), model(x))
    return "AOTInductor package compiled, loaded and matches eager"


def _triton() -> str:
    import torch
    import triton
    import triton.language as tl

    @triton.jit  # type: ignore[untyped-decorator, unused-ignore]
    def add(a_ptr, b_ptr, out_ptr, n, BLOCK: tl.constexpr):  # type: ignore[no-untyped-def]
        offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offsets < n
        a = tl.load(a_ptr + offsets, mask=mask)
        b = tl.load(b_ptr + offsets, mask=mask)
        tl.store(out_ptr + offsets, a + b, mask=mask)

    a = torch.randn(4096, device="cuda")
    b = torch.randn(4096, device="cuda")
    out = torch.empty_like(a)
    add[(4,)](a, b, out, a.numel(), BLOCK=1024)
    torch.cuda.synchronize()
    torch.testing.assert_close(out, a + b)
    return f"Triton {triton.__version__} kernel matches torch.add on {torch.cuda.get_device_name()}"


def checks(tmp: Path) -> dict[str, Callable[[], str]]:
    import torch

    found: dict[str, Callable[[], str]] = {"compile": _compile, "aoti": lambda: _aoti(tmp)}
    if torch.cuda.is_available():
        found["triton"] = _triton
    return found


def main() -> int:
    results: dict[str, dict[str, object]] = {}
    with tempfile.TemporaryDirectory(prefix="torch-matrix-smoke-") as tmp:
        # A cache of its own: the image's home may not be writable for the user it runs as.
        os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(Path(tmp) / "inductor"))
        os.environ.setdefault("TRITON_CACHE_DIR", str(Path(tmp) / "triton"))
        for name, check in checks(Path(tmp)).items():
            try:
                results[name] = {"ok": True, "detail": check()}
            except Exception as exc:  # any failure is the finding; the rest still run
                tail = traceback.format_exc().strip().splitlines()[-3:]
                results[name] = {"ok": False, "detail": f"{type(exc).__name__}: {exc}"[:500]}
                sys.stderr.write("\n".join(tail) + "\n")
    print(json.dumps({"checks": results}))
    return 0 if all(r["ok"] for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
