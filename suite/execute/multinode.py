"""A distributed cell on several nodes: this process coordinates, a node launcher places one
torchrun agent per node.

Each cell gets a rendezvous of its own: torchrun's c10d backend with its store on node 0
(`is_host` said, not guessed from host names), and an id made of the run, the cell, the round
and a random attempt token, so that two nodes whose cell orders diverged wait in different
rendezvous and never train together. The agents' output comes back through the launcher; the
cell's record is the one global rank 0 says there (suite/core/wire.py), wherever it ran, and
nothing is read from any node's disk. Every rank beats once a second to a listener here; when
the cell times out, the node whose beats stopped is named.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from suite.core.records import FailureMode, Result, Status
from suite.core.results import cell_file, failure_result, utc_now, write_result
from suite.core.spec import CellSpec
from suite.core.validation import validate
from suite.core.wire import (
    BEAT_INTERVAL_S,
    BEAT_VAR,
    CELL_VAR,
    NODE_VAR,
    NODES_VAR,
    RECORD_MARK,
    heard,
)
from suite.execute.environment import RunOptions
from suite.execute.forensics import forensic_env, hang_in, hang_text
from suite.execute.launch import TERM_GRACE_S, ProcessExit, _preexec, read_tail, signal_name
from suite.execute.nodes import Agent, NodeLauncher, route_from_here
from suite.execute.outcome import (
    LOG_READ_LIMIT,
    rank_failures,
    rank_outcome,
    torchrun_deaths,
    worker_call,
)

# A node is silent when its last beat is this much older than the end of the cell.
SILENT_AFTER_S = 4 * BEAT_INTERVAL_S
# How long the other nodes' agents may take to end on their own once one node's agent failed
# (its ranks' peers see their connections close) before they are stopped.
PEER_GRACE_S = 30.0


def rendezvous_id(run_id: str, stem: str) -> str:
    """Unique to the run, the cell, its round, and this attempt at it."""
    return f"{run_id}.{stem}.{secrets.token_hex(4)}"


def agent_argv(
    spec: CellSpec,
    options: RunOptions,
    result: Path,
    run_id: str,
    round_no: int,
    endpoint: str,
    rdzv_id: str,
    node: int,
    address: str,
    join_timeout_s: float,
) -> list[str]:
    """Node NODE's torchrun command for the cell."""
    return [
        options.interpreter, "-m", "torch.distributed.run",
        "--nnodes", str(spec.nodes), "--nproc-per-node", str(spec.ranks),
        "--rdzv-backend", "c10d", "--rdzv-endpoint", endpoint, "--rdzv-id", rdzv_id,
        "--rdzv-conf", f"is_host={str(node == 0).lower()},join_timeout={join_timeout_s:g}",
        "--local-addr", address, "--max-restarts", str(spec.restarts),
        "-m", "suite.worker", *worker_call(spec, result, run_id, round_no),
    ]  # fmt: skip


class Heartbeats:
    """A datagram listener at this host's address towards the nodes: when each node last
    said it was alive, for one cell's rendezvous id."""

    def __init__(self, toward: str, rdzv_id: str) -> None:
        self.rdzv_id = rdzv_id
        self.last: dict[int, float] = {}
        self.ended: float | None = None  # when the agents were told to stop
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            here = route_from_here(toward)
        except OSError:  # a node name this host cannot resolve: its agent will say more
            here = "0.0.0.0"
        self._sock.bind((here, 0))
        self._sock.settimeout(0.25)
        host, port = self._sock.getsockname()
        self.address = f"{socket.getfqdn() if host == '0.0.0.0' else host}:{port}"
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._listen, daemon=True)
        self._thread.start()

    def _listen(self) -> None:
        while not self._stop.is_set():
            try:
                data = self._sock.recv(4096)
            except (TimeoutError, OSError):
                continue
            with contextlib.suppress(ValueError, TypeError):
                beat = json.loads(data)
                node, cell = beat.get("node"), beat.get("cell")
                if cell == self.rdzv_id and isinstance(node, int) and self.ended is None:
                    self.last[node] = time.monotonic()

    def end(self) -> None:
        """The agents are being stopped: silence from here on is the stop, not the fault."""
        if self.ended is None:
            self.ended = time.monotonic()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        self._sock.close()


def run_agents(
    commands: Sequence[tuple[list[str], Mapping[str, str] | None]],
    logs: Sequence[Path],
    timeout_s: float,
    stopping: Callable[[], None] | None = None,
) -> list[ProcessExit]:
    """Start every node's agent at once; wait for all of them, and stop them all (their whole
    process groups; an ssh agent stops when its input closes) at the timeout. `stopping` is
    called once the wait is over, before any agent is signalled."""
    procs = []
    start = time.perf_counter()
    for (argv, env), log in zip(commands, logs, strict=True):
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                argv, stdin=subprocess.PIPE, stdout=out, stderr=subprocess.STDOUT,
                env=dict(env) if env is not None else None, start_new_session=True,
                preexec_fn=lambda: _preexec(None),
            )  # fmt: skip
            procs.append(proc)
    deadline = start + timeout_s
    codes: list[int | None] = [None] * len(procs)
    walls: list[float] = [0.0] * len(procs)
    orphaned = False  # a node's agent was killed: the others can only fail or hang now
    while any(c is None for c in codes) and time.perf_counter() < deadline:
        for i, proc in enumerate(procs):
            if codes[i] is None and proc.poll() is not None:
                codes[i], walls[i] = proc.returncode, time.perf_counter() - start
                code = proc.returncode
                if (code < 0 or 128 < code < 193) and not orphaned:  # killed, here or remote
                    orphaned, deadline = True, min(deadline, time.perf_counter() + PEER_GRACE_S)
        time.sleep(0.05)
    # Agents still running at the cell's timeout timed out; those stopped after a peer was
    # killed (torchrun restarts nothing: a lost node never comes back) did not: it is the cause.
    timed_out = [c is None and not orphaned for c in codes]
    if stopping is not None:
        stopping()
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for proc in procs:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, sig)
        _close_inputs(procs)
        end = time.perf_counter() + TERM_GRACE_S
        while any(p.poll() is None for p in procs) and time.perf_counter() < end:
            time.sleep(0.05)
    for proc in procs:
        proc.wait()
    wall = time.perf_counter() - start
    return [
        ProcessExit(
            returncode=None if late else code,
            signal_name=None if late or code is None else signal_name(code),
            timed_out=late,
            wall_s=wall if code is None else w,
            maxrss_bytes=None,
            pid=proc.pid,
        )
        for proc, code, late, w in zip(procs, codes, timed_out, walls, strict=True)
    ]


def _close_inputs(procs: Sequence[subprocess.Popen[bytes]]) -> None:
    for proc in procs:
        if proc.stdin is not None and not proc.stdin.closed:
            with contextlib.suppress(OSError):
                proc.stdin.close()


def run_on_nodes(
    spec: CellSpec,
    run_id: str,
    run_dir: Path,
    options: RunOptions,
    env: Mapping[str, str],
    round_no: int,
    nodes: NodeLauncher,
    image: str | None = None,
) -> Result:
    """Run SPEC's world on NODES' nodes (from IMAGE, where the side is an image); the record
    global rank 0 said, or one that names the node that failed it."""
    path = cell_file(run_dir, spec.cell_id, round_no)
    path.unlink(missing_ok=True)
    nodes.check_nodes(spec.nodes)
    rdzv_id = rendezvous_id(run_id, path.stem)
    nodes.begin(rdzv_id)
    addresses = nodes.addresses(spec.nodes)
    endpoint = f"{addresses[0]}:{nodes.port()}"
    timeout = options.timeout_s or spec.timeout_s
    beats = Heartbeats(addresses[0], rdzv_id)
    logs = [run_dir / "logs" / f"{path.stem}.node{i}.log" for i in range(spec.nodes)]
    started_at = utc_now()
    # For the ranks' watchdogs (stacks before the stop) and, on CUDA, NCCL's flight recorder.
    forensic = forensic_env(spec, run_dir, path.stem, timeout)
    try:
        join = nodes.join_timeout_s or timeout
        agents = []
        for i, address in enumerate(addresses):
            argv = agent_argv(
                spec, options, path, run_id, round_no, endpoint, rdzv_id, i, address, join
            )
            agent_env = _agent_env(env, nodes, run_dir, path.stem, i, spec.nodes, beats, rdzv_id)
            agents.append(Agent(i, argv, {**agent_env, **forensic}, private=run_dir, image=image))
        commands = nodes.place(agents)
        exits = [nodes.reported(e) for e in run_agents(commands, logs, timeout, beats.end)]
    finally:
        beats.stop()
        nodes.finish()
        for i in range(spec.nodes):  # the nodes' compile caches, where they are this host's
            shutil.rmtree(run_dir / ".inductor-cache" / f"{path.stem}.node{i}", ignore_errors=True)
    texts = [read_tail(log, LOG_READ_LIMIT) for log in logs]
    names = [f"node {i} ({a})" for i, a in enumerate(addresses)]
    doc = _said_record(texts, run_id, spec.cell_id, exits)
    if doc is None:
        status, mode, message = _what_failed(texts, run_id, exits, names, beats, timeout)
        hang = hang_in(texts, run_id, spec.world_size, run_dir, path.stem)
        hang = hang if status == "timeout" else None  # what each rank said before the stop
        message = "; ".join(m for m in (message, hang_text(hang)) if m)
        doc = failure_result(
            spec, run_id, round_no, status=status, mode=mode, message=message,
            started_at=started_at, wall_s=max(e.wall_s for e in exits),
            exit_code=next((e.returncode for e in exits if e.returncode), None),
            signal=next((e.signal_name for e in exits if e.signal_name), None),
            stderr=_tails(texts, names),
        )  # fmt: skip
        if hang is not None:
            doc["hang"] = hang
    elif (harness := doc.get("harness")) is not None:
        harness["parent_wall_s"] = max(e.wall_s for e in exits)
    doc["placement"] = _placement(nodes, endpoint, rdzv_id, addresses, exits)
    write_result(path, doc)
    return doc


def _placement(
    nodes: NodeLauncher,
    endpoint: str,
    rdzv_id: str,
    addresses: Sequence[str],
    exits: Sequence[ProcessExit],
) -> dict[str, Any]:
    """Where the cell's world ran: the launcher, the rendezvous and each node's exit."""
    return {
        "launcher": nodes.kind,
        "settings": nodes.evidence(),
        "rendezvous": endpoint,
        "rdzv_id": rdzv_id,
        "nodes": [
            {"node": i, "address": a, "exit_code": e.returncode, "signal": e.signal_name}
            for i, (a, e) in enumerate(zip(addresses, exits, strict=True))
        ],
    }


def _agent_env(
    env: Mapping[str, str],
    nodes: NodeLauncher,
    run_dir: Path,
    stem: str,
    node: int,
    count: int,
    beats: Heartbeats,
    rdzv_id: str,
) -> dict[str, str]:
    """What node NODE's agent gets: the worker's environment (no inherited world), where it
    is, where to beat, and the interface its ranks talk on."""
    out = {
        **env,
        NODE_VAR: str(node),
        NODES_VAR: str(count),
        BEAT_VAR: beats.address,
        CELL_VAR: rdzv_id,
        "TORCHINDUCTOR_CACHE_DIR": str(run_dir / ".inductor-cache" / f"{stem}.node{node}"),
    }
    if nodes.interface:
        out["GLOO_SOCKET_IFNAME"] = out["NCCL_SOCKET_IFNAME"] = nodes.interface
    return out


def _said_record(
    texts: Sequence[str], run_id: str, cell_id: str, exits: Sequence[ProcessExit]
) -> Result | None:
    """The record global rank 0 said, if every agent ended well and it is whole and valid."""
    if any(e.timed_out or e.returncode != 0 for e in exits):
        return None
    for text in texts:
        for doc in heard(text, RECORD_MARK):
            if doc.get("run_id") != run_id or doc.get("cell_id") != cell_id:
                continue
            try:
                validate(doc, "torch-matrix/result", file=f"the record of {cell_id}")
            except Exception:
                return None
            return doc  # type: ignore[return-value]
    return None


def _what_failed(
    texts: Sequence[str],
    run_id: str,
    exits: Sequence[ProcessExit],
    names: Sequence[str],
    beats: Heartbeats,
    timeout: float,
) -> tuple[Status, FailureMode, str]:
    """The cell's status, failure mode and message: the node that stopped answering, whose
    agent was killed, or the rank that raised first."""
    died = "; ".join(
        f"{names[i]}: {d}" for i, text in enumerate(texts) if (d := torchrun_deaths(text))
    )
    parts, raised, raised_mode = rank_failures(texts, run_id, names)
    if any(e.timed_out for e in exits):
        message = f"no result within {timeout:g}s; every node's agent stopped. " + _silent(
            beats, names
        )
        return "timeout", "timeout", "; ".join(m for m in (message, died, parts) if m)
    killed = next(((i, e) for i, e in enumerate(exits) if e.signal_name), None)
    if killed is not None:
        i, e = killed
        message = f"{names[i]}: its agent was killed by {e.signal_name}"
        return "crashed", "signal", "; ".join(m for m in (message, died, parts) if m)
    said = rank_outcome(parts, raised, raised_mode)
    if said is not None and "(SIG" not in died:
        return said[0], said[1], parts
    failed = next(((i, e) for i, e in enumerate(exits) if e.returncode), None)
    if failed is not None:
        i, e = failed
        message = f"{names[i]}: its agent exited with code {e.returncode} and no record came back"
        return "crashed", "exit-code", "; ".join(m for m in (message, died, parts) if m)
    return "crashed", "no-result", "every node's agent exited 0, but global rank 0 said no record"


def _silent(beats: Heartbeats, names: Sequence[str]) -> str:
    """Which nodes stopped answering before the end, by their heartbeats."""
    if not beats.last:
        return f"No node's heartbeat reached the coordinator at {beats.address}."
    now = beats.ended if beats.ended is not None else time.monotonic()
    silent = []
    for i, name in enumerate(names):
        last = beats.last.get(i)
        if last is None:
            silent.append(f"{name} never answered")
        elif now - last > SILENT_AFTER_S:
            silent.append(f"{name} stopped answering {now - last:.0f}s before the end")
    if not silent:
        return "Every node answered until the end: its ranks were alive, but did not finish."
    return "; ".join(silent) + "."


def _tails(texts: Sequence[str], names: Sequence[str]) -> str:
    return "\n".join(f"== {name}\n{text[-1500:]}" for name, text in zip(names, texts, strict=True))


def unplaceable(spec: CellSpec, run_id: str, run_dir: Path, round_no: int) -> Result:
    """A side whose workers start in a container places its cell's nodes only through a
    launcher that runs images (ssh, kubernetes); any other places none."""
    path = cell_file(run_dir, spec.cell_id, round_no)
    doc = failure_result(
        spec, run_id, round_no, status="skipped", mode="unavailable",
        message="this side is an image: a cell on several nodes runs it through a launcher "
        "that starts the image on each node (ssh, kubernetes); this one runs interpreters",
        started_at=utc_now(), wall_s=0.0,
    )  # fmt: skip
    write_result(path, doc)
    return doc
