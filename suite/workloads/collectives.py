"""The collectives workload: bandwidth and exact results of one collective (c10d or torchcomms).

Sizes follow nccl-tests: ``size`` is the whole buffer of all_reduce and broadcast, the gathered
output of all_gather, the scattered input of reduce_scatter and each rank's send buffer of
all_to_all (rounded down to a multiple of the world size). Bandwidths (GB/s, 1e9 bytes) come
from this module's own timing loop: a barrier (not timed) before every sample, then one
collective plus a device sync; the cell's number is the slowest rank's p50, as a collective is
done only when its last rank is. ``busbw_GBps`` uses the nccl-tests factors.

Inputs are closed-form values (small multiples of 1/256 plus rank+1), so every sum is exact in
fp32 and the result must equal the closed form whatever the reduction order. Rank 0 checks
every rank's result (sent to it point to point), one check per rank.

Ranks: 2 in smoke; full uses $TORCH_MATRIX_WORLD_SIZE (default 8), since planning cannot import
torch to count devices. Also home of ``measure_in_lockstep``, which the other distributed
workloads use as well.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from suite.core.backends import backend_entry
from suite.workloads.base import CellContext, Param, ParamValue, Skip, Unsupported, Workload

if TYPE_CHECKING:
    import torch

OPS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all")
SIZES = {"1KiB": 1 << 10, "64KiB": 1 << 16, "1MiB": 1 << 20, "16MiB": 1 << 24, "64MiB": 1 << 26}
_UNSUPPORTED = ("not supported", "unsupported", "does not support", "not implemented")
_LOCKSTEP_TIMEOUT_S = 600.0


def world_size_for(profile: str) -> int:
    return 2 if profile == "smoke" else int(os.environ.get("TORCH_MATRIX_WORLD_SIZE", "8"))


def bus_factor(op: str, n: int) -> float:
    """nccl-tests' busbw / algbw."""
    return {"all_reduce": 2 * (n - 1) / n, "broadcast": 1.0}.get(op, (n - 1) / n)


class Store(Protocol):
    """The part of a c10d Store that agree_on_calls uses."""

    def set(self, key: str, value: str) -> None: ...
    def get(self, key: str) -> bytes: ...
    def check(self, keys: list[str]) -> bool: ...


def measure_in_lockstep(
    ctx: CellContext, fn: Callable[[], Any], *, items_per_iter: float, unit: str
) -> None:
    """ctx.measure on every rank, then make every rank have called fn equally often.

    ctx.measure stops on each rank's own clock, so one rank may start a sample that the others
    never join and so block in its collective for good; agree_on_calls releases it.
    """
    import torch.distributed as dist

    calls = 0
    longest = 0.0

    def counted() -> None:
        nonlocal calls, longest
        calls += 1
        start = time.perf_counter()
        fn()
        longest = max(longest, time.perf_counter() - start)

    ctx.measure(counted, items_per_iter=items_per_iter, unit=unit)
    get_store = getattr(dist.distributed_c10d, "_get_default_store", None)
    if ctx.world_size > 1 and get_store is not None:
        # A rank that is not blocked posts within one step's local tail of its last collective;
        # the blocked rank's last sample includes this wait, so keep it short.
        agree_on_calls(get_store(), ctx.rank, ctx.world_size, calls, counted, 0.5 + 2 * longest)


def agree_on_calls(
    store: Store,
    rank: int,
    world: int,
    calls: int,
    call: Callable[[], None],
    patience_s: float,
    timeout_s: float = _LOCKSTEP_TIMEOUT_S,
) -> int:
    """Call call() (untimed) until every rank has made the same number of calls; return it.

    Counts go through the store, a channel apart from the process group. Whoever is behind the
    highest posted count calls again; a rank that has posted nothing after patience_s is taken
    to be blocked one call ahead. Guessing wrong costs one extra call, never a hang: the rank
    that was only slow then sees the higher count and follows. A rank returns only once every
    rank has posted a final count equal to its own, so none leaves while another still steps.
    """
    ranks = range(world)

    def read(kind: str) -> dict[int, int]:
        keys = {r: f"torch-matrix/lockstep/{kind}/{r}" for r in ranks}
        return {r: int(store.get(k)) for r, k in keys.items() if store.check([k])}

    def post(kind: str, value: int) -> None:
        store.set(f"torch-matrix/lockstep/{kind}/{rank}", str(value))

    start = posted = time.monotonic()
    post("count", calls)
    while True:
        counts, finals = read("count"), read("final")
        target = max(counts.values())
        if len(counts) < world and time.monotonic() - posted > patience_s:
            target = max(target, calls + 1)
        if calls < target:
            post("count", calls + 1)  # before blocking, so that a rank done early follows
            call()
            calls += 1
            posted = time.monotonic()
            continue
        if len(counts) == world and set(counts.values()) == {calls}:
            if finals.get(rank) != calls:
                post("final", calls)
            if len(finals) == world and set(finals.values()) == {calls}:
                return calls
        if time.monotonic() - start > timeout_s:
            raise RuntimeError(f"ranks did not agree on the sample count: {counts}")
        time.sleep(0.002)


# What a real torchcomms build has: a communicator factory and the reduction operators.
TORCHCOMMS_API = ("new_comm", "ReduceOp")


def load_torchcomms() -> Any:
    """The real torchcomms module, or Skip saying why not (absent, name-only, broken)."""
    import importlib
    import importlib.metadata

    try:
        module = importlib.import_module("torchcomms")
    except ModuleNotFoundError as exc:
        if exc.name != "torchcomms":
            raise Skip(f"torchcomms is installed but cannot be imported: {exc}") from exc
        raise Skip(
            "torchcomms is not installed (it comes from the PyTorch nightly index: "
            "pip install --pre torchcomms --index-url https://download.pytorch.org/whl/nightly/cu128)"
        ) from exc
    except Exception as exc:  # the name-only PyPI release raises ImportError on import
        try:
            version = importlib.metadata.version("torchcomms")
        except importlib.metadata.PackageNotFoundError:
            version = "unknown"
        if version.startswith("0.0.") or "pypi" in str(exc).lower():
            raise Skip(f"the installed 'torchcomms' is PyPI's name-only release: {exc}") from exc
        raise Skip(f"torchcomms {version} is installed but cannot be imported: {exc!r}") from exc
    missing = [n for n in TORCHCOMMS_API if not hasattr(module, n)]
    if missing:
        raise Skip(
            "the installed 'torchcomms' is PyPI's name-only release: "
            f"it has no {', '.join(missing)} (module {getattr(module, '__file__', '?')})"
        )
    return module


def _closed_form(
    op: str, rank: int, n: int, elems: int, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """(this rank's input, the expected output), on the CPU, in dtype."""
    import torch

    def x(r: int, length: int, offset: int = 0) -> torch.Tensor:
        i = torch.arange(offset, offset + length, dtype=torch.int64)
        return ((i % 251).to(dtype) / 256) + (r + 1)

    m = elems // n
    if op == "all_reduce":
        return x(rank, elems), sum((x(r, elems) for r in range(1, n)), x(0, elems))
    if op == "all_gather":
        return x(rank, m), torch.cat([x(r, m) for r in range(n)])
    if op == "reduce_scatter":
        mine = sum((x(r, m, rank * m) for r in range(1, n)), x(0, m, rank * m))
        return x(rank, elems), mine
    if op == "broadcast":
        return x(rank, elems), x(0, elems)
    return x(rank, elems), torch.cat([x(r, m, rank * m) for r in range(n)])  # all_to_all


def _check_on_rank0(ctx: CellContext, op: str, result: torch.Tensor, elems: int) -> None:
    """Rank 0 checks every rank's result, received point to point, one check per rank.

    Only rank 0 calls ctx.check_accuracy: the worker saves checked outputs to one file per
    cell, which ranks writing at once would race on.
    """
    import torch
    import torch.distributed as dist

    if ctx.rank != 0:
        dist.send(result.contiguous(), dst=0)
        return
    for r in range(ctx.world_size):
        got = result
        if r:
            got = torch.empty_like(result)
            dist.recv(got, src=r)
        n = ctx.world_size
        expected = _closed_form(op, r, n, elems, torch.float32)[1]
        expected64 = _closed_form(op, r, n, elems, torch.float64)[1]
        ctx.check_accuracy(
            got,
            expected,
            expected64,
            reference_name="closed form",
            dtype="fp32",
            label=f"{op}[rank{r}]",
        )


Call = Callable[["torch.Tensor", "torch.Tensor"], Any]


def _collective(
    api: str, op: str, backend_name: str, device: torch.device
) -> tuple[Call, Callable[[], None]]:
    """(call(input, output) running op, close); all_reduce and broadcast work in place."""
    import torch.distributed as dist

    if api == "c10d":
        # The *_single names are the current ones; 2.14 deprecates the *_into_tensor spellings.
        gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
        scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
        calls: dict[str, Call] = {
            "all_reduce": lambda i, o: dist.all_reduce(i),
            "all_gather": lambda i, o: gather(o, i),
            "reduce_scatter": lambda i, o: scatter(o, i),
            "broadcast": lambda i, o: dist.broadcast(i, src=0),
            "all_to_all": lambda i, o: dist.all_to_all_single(o, i),
        }
        return calls[op], lambda: None
    # Untested on hardware: no torchcomms build runs on CPU only. Follows the torchcomms API
    # (a communicator from its factory, the *_single collectives, its sum operator).
    tc = load_torchcomms()
    name = backend_entry(backend_name).comms
    comm = tc.new_comm(name, device, name="torch_matrix_collectives")
    total = getattr(tc, TORCHCOMMS_API[1]).SUM
    calls = {
        "all_reduce": lambda i, o: comm.all_reduce(i, total, async_op=False),
        "all_gather": lambda i, o: comm.all_gather_single(o, i, async_op=False),
        "reduce_scatter": lambda i, o: comm.reduce_scatter_single(o, i, total, async_op=False),
        "broadcast": lambda i, o: comm.broadcast(i, 0, async_op=False),
        "all_to_all": lambda i, o: comm.all_to_all_single(o, i, async_op=False),
    }
    return calls[op], comm.finalize


class Collectives(Workload):
    name = "collectives"
    description = "One collective (c10d or torchcomms): algbw/busbw as nccl-tests, exact result"
    params = (
        Param("op", OPS, OPS),
        Param("size", tuple(SIZES), ("1KiB", "1MiB"), help="bytes moved, as nccl-tests count"),
        Param("api", ("c10d", "torchcomms"), ("c10d", "torchcomms")),
    )
    sizes = {"smoke": {"samples": 20}, "full": {"samples": 50}}
    # The throughput gate judges bus bandwidth (nccl-tests' busbw): bytes per step times the
    # op's bus factor, at the worst rank's step time (suite/worker/worst_rank.py).
    throughput_unit = "bus bytes/s"
    distributed = True

    def ranks(self, params: Mapping[str, ParamValue], profile: str) -> int:
        return world_size_for(profile)

    def run(self, ctx: CellContext) -> None:
        op, api = str(ctx.params["op"]), str(ctx.params["api"])
        n = ctx.world_size
        elems = SIZES[str(ctx.params["size"])] // 4
        elems -= elems % n
        nbytes = elems * 4
        call, close = _collective(api, op, ctx.backend.name, ctx.device)
        try:
            self._run(ctx, op, call, nbytes, elems)
        finally:
            close()

    def _run(self, ctx: CellContext, op: str, call: Call, nbytes: int, elems: int) -> None:
        import torch
        import torch.distributed as dist

        n, dev = ctx.world_size, ctx.device

        inp = _closed_form(op, ctx.rank, n, elems, torch.float32)[0]
        out_len = {"all_gather": elems, "reduce_scatter": elems // n}.get(op, elems)
        inp = inp.to(dev)
        out = torch.empty(out_len, dtype=torch.float32, device=dev)
        try:
            call(inp, out)
            ctx.backend.sync()
        except (RuntimeError, NotImplementedError) as exc:
            if any(marker in str(exc).lower() for marker in _UNSUPPORTED):
                raise Unsupported(str(exc)) from exc
            raise
        _check_on_rank0(ctx, op, inp if op in ("all_reduce", "broadcast") else out, elems)

        if op == "all_reduce":
            inp.zero_()  # timed in place: sums of zeros stay zeros instead of growing to inf

        def step() -> None:
            call(inp, out)
            ctx.backend.sync()

        measure_in_lockstep(
            ctx, step, items_per_iter=nbytes * bus_factor(op, n), unit=self.throughput_unit
        )

        samples = []
        for _ in range(int(ctx.size["samples"])):
            dist.barrier()
            start = time.perf_counter()
            step()
            samples.append(time.perf_counter() - start)
        p50 = sorted(samples)[len(samples) // 2]
        slowest = torch.tensor([p50], dtype=torch.float64, device=dev)
        every = [torch.zeros_like(slowest) for _ in range(dist.get_world_size())]
        dist.all_gather(every, slowest)  # the slowest rank's p50 is the cell's
        cell_p50 = max(float(t[0]) for t in every)
        algbw = nbytes / cell_p50 / 1e9
        ctx.rank_metric("p50_s", p50, "s")
        ctx.rank_metric("algbw_GBps", nbytes / p50 / 1e9, "GB/s")
        ctx.metric("p50_s", cell_p50, "s")
        ctx.metric("algbw_GBps", algbw, "GB/s")
        ctx.metric("busbw_GBps", algbw * bus_factor(op, n), "GB/s")
        ctx.metric("bytes", nbytes, "B")
        ctx.metric("world_size", n)
