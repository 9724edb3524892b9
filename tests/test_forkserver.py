"""The fork server: workers forked from a pre-importing server write the results plain workers
write, stay isolated from one another, and are bounded, killed and cleaned up as run_process's are.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from suite.core.errors import EnvironmentProblem
from suite.core.results import new_run_id, read_result
from suite.core.spec import CellSpec
from suite.execute.cell import worker_argv
from suite.execute.environment import RunOptions, worker_env
from suite.execute.forkclient import ForkServer, fork_launcher_enabled
from suite.execute.forkserver import Request, import_time_env
from suite.execute.launch import Launcher, ProcessExit, Step, run_process
from tests.helpers import PLANTED, REPO, TESTS, cli

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")

FORK_PLANTED = TESTS / "plugins" / "fork_planted.py"
# A safeguard for waits on the machine, not a measurement: nothing asserts how long things take.
PATIENCE_S = 120.0


def _spec(obj: str, plugin: Path = FORK_PLANTED) -> CellSpec:
    return CellSpec(obj.lower(), f"{plugin}:{obj}", (), "cpu", "smoke")


def _alive(pid: int) -> bool:
    """True while pid is a process that has not exited (a zombie has)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def _group_members(pgid: int) -> list[int]:
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
            members.append(int(entry.name))
    return members


def _wait_until(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + PATIENCE_S
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting: {what}")
        time.sleep(0.05)


def _read_pids(path: Path) -> list[int]:
    _wait_until(path.is_file, f"{path} to be written by the worker")
    return [int(v) for v in path.read_text().split()]


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return worker_env(RunOptions(out=tmp_path_factory.mktemp("env")))


@pytest.fixture(scope="module")
def shared(env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[ForkServer]:
    """One server for the tests that do not end it."""
    with ForkServer(sys.executable, env, tmp_path_factory.mktemp("srv") / "server.log") as server:
        yield server


def _cell(
    launcher: Launcher,
    tmp: Path,
    spec: CellSpec,
    env: dict[str, str],
    *,
    cwd: Path | None = None,
    timeout_s: float = PATIENCE_S,
) -> tuple[ProcessExit, dict[str, Any] | None, Path]:
    result = tmp / "cells" / f"{spec.cell_id}.json"
    log = tmp / "logs" / f"{spec.cell_id}.log"
    argv = worker_argv(sys.executable, spec, result, new_run_id(), 0)
    outcome = launcher(Step(argv, log_path=log, timeout_s=timeout_s, env=env, cwd=cwd))
    return outcome, (read_result(result) if result.is_file() else None), log


def _metrics(doc: dict[str, Any] | None) -> dict[str, Any]:
    assert doc is not None and doc["status"] == "ok", doc
    return {k: v["value"] for k, v in doc["metrics"].items()}


def test_a_forked_cell_writes_the_record_a_plain_worker_writes(
    shared: ForkServer, env: dict[str, str], tmp_path: Path
) -> None:
    quick = CellSpec("quick", f"{PLANTED}:Quick", (("n", 8),), "cpu", "smoke")
    forked, doc, _ = _cell(shared, tmp_path / "forked", quick, env)
    plain, reference, _ = _cell(run_process, tmp_path / "plain", quick, env)
    assert (forked.returncode, forked.signal_name, forked.timed_out) == (0, None, False)
    assert forked.maxrss_bytes and forked.maxrss_bytes > 0
    assert plain.returncode == 0 and doc is not None and reference is not None
    assert doc["status"] == reference["status"] == "ok"
    assert doc.keys() == reference.keys()
    assert doc["harness"].keys() == reference["harness"].keys()
    assert doc["torch"] == reference["torch"]
    assert doc["correctness"]["passed"] is True
    # ...and it really was forked by the server.
    _, echo, _ = _cell(shared, tmp_path / "echo", _spec("Echo"), env)
    assert _metrics(echo)["ppid"] == shared.server_pid


def test_a_worker_killing_itself_leaves_the_server_serving(
    shared: ForkServer, env: dict[str, str], tmp_path: Path
) -> None:
    outcome, doc, _ = _cell(shared, tmp_path / "k", _spec("SigKill"), env)
    assert (outcome.returncode, outcome.signal_name, outcome.timed_out) == (-9, "SIGKILL", False)
    assert doc is None
    server = shared.server_pid
    segv, _, log = _cell(shared, tmp_path / "s", _spec("Segfault", PLANTED), env)
    assert segv.signal_name == "SIGSEGV"
    assert "Fatal Python error" in log.read_text()  # faulthandler wrote into the cell's log
    _, echo, _ = _cell(shared, tmp_path / "e", _spec("Echo"), env)
    assert shared.server_pid == server and _metrics(echo)["ppid"] == server


def test_consecutive_workers_are_separate_processes(
    shared: ForkServer, env: dict[str, str], tmp_path: Path
) -> None:
    _, first, _ = _cell(shared, tmp_path / "1", _spec("Echo"), env)
    _, second, _ = _cell(shared, tmp_path / "2", _spec("Echo"), env)
    one, two = _metrics(first), _metrics(second)
    assert one["pid"] != two["pid"]
    assert one["ppid"] == two["ppid"] == shared.server_pid
    assert one["pgid"] == one["pid"] and two["pgid"] == two["pid"]  # each leads its own group
    assert one["seen_mark"] is None and two["seen_mark"] is None


def test_the_worker_sees_the_requests_env_and_cwd(
    shared: ForkServer, env: dict[str, str], tmp_path: Path
) -> None:
    here = tmp_path / "here"
    here.mkdir()
    request_env = {**env, "FORK_TEST_VALUE": "from the request"}
    _, doc, _ = _cell(shared, tmp_path / "c", _spec("Echo"), request_env, cwd=here)
    seen = _metrics(doc)
    assert seen["ppid"] == shared.server_pid
    assert seen["value"] == "from the request"
    assert Path(seen["cwd"]) == here.resolve()
    assert seen["pythonpath"] == env["PYTHONPATH"]


def test_the_server_stays_one_thread_without_cuda(
    shared: ForkServer, env: dict[str, str], tmp_path: Path
) -> None:
    _, doc, _ = _cell(shared, tmp_path / "t", _spec("Echo"), env)
    assert _metrics(doc)["cuda_initialized_at_start"] is False
    assert shared.server_pid is not None
    assert os.listdir(f"/proc/{shared.server_pid}/task") == [str(shared.server_pid)]


def test_what_the_server_cannot_start_faithfully_starts_plainly(
    env: dict[str, str], tmp_path: Path
) -> None:
    with ForkServer(sys.executable, env, tmp_path / "server.log") as server:
        out = tmp_path / "ppid.txt"
        code = f"import os; open({str(out)!r}, 'w').write(str(os.getppid()))"
        outcome = server(
            Step([sys.executable, "-c", code], log_path=tmp_path / "c.log", timeout_s=60)
        )
        assert outcome.returncode == 0 and out.read_text() == str(os.getpid())
        assert server.server_pid is None  # torchrun-shaped or foreign argv never starts it
        threads = {**env, "OMP_NUM_THREADS": "1" if env.get("OMP_NUM_THREADS") != "1" else "2"}
        _, doc, _ = _cell(server, tmp_path / "omp", _spec("Echo"), threads)
        assert _metrics(doc)["ppid"] == os.getpid()  # read at import: a fork would ignore it
        _, doc, _ = _cell(server, tmp_path / "fork", _spec("Echo"), env)
        assert _metrics(doc)["ppid"] == server.server_pid


def test_a_hanging_worker_times_out_and_its_group_is_gone(
    shared: ForkServer, env: dict[str, str], tmp_path: Path
) -> None:
    pidfile = tmp_path / "pids"
    hang_env = {**env, "FORK_TEST_PIDFILE": str(pidfile), "FORK_TEST_GRANDCHILD": "1"}
    outcome, doc, _ = _cell(shared, tmp_path / "h", _spec("Hang"), hang_env, timeout_s=10)
    worker, server, grandchild = _read_pids(pidfile)
    try:
        assert outcome.timed_out is True and outcome.returncode is None and doc is None
        assert outcome.signal_name is None
        assert server == shared.server_pid
        assert not _alive(worker) and not _alive(grandchild)
        assert _group_members(worker) == []
    finally:
        if _alive(grandchild):
            os.kill(grandchild, signal.SIGKILL)
    _, echo, _ = _cell(shared, tmp_path / "e", _spec("Echo"), env)
    assert _metrics(echo)["ppid"] == server


def test_a_server_lost_mid_request_is_a_crash_and_the_next_call_restarts_it(
    env: dict[str, str], tmp_path: Path
) -> None:
    pidfile = tmp_path / "pids"
    hang_env = {**env, "FORK_TEST_PIDFILE": str(pidfile)}
    with ForkServer(sys.executable, env, tmp_path / "server.log") as server:

        def kill_server() -> None:
            _, server_pid, _ = _read_pids(pidfile)
            os.kill(server_pid, signal.SIGKILL)

        killer = threading.Thread(target=kill_server)
        killer.start()
        outcome, _, log = _cell(server, tmp_path / "h", _spec("Hang"), hang_env)
        killer.join()
        worker, first_server, _ = _read_pids(pidfile)
        assert (outcome.returncode, outcome.timed_out) == (1, False)
        assert "fork server" in log.read_text() and "was lost" in log.read_text()
        _wait_until(lambda: not _alive(worker), "the orphaned worker to die with its server")
        _, echo, _ = _cell(server, tmp_path / "e", _spec("Echo"), env)
        assert server.server_pid not in (None, first_server)
        assert _metrics(echo)["ppid"] == server.server_pid


PARENT = """
import json, sys
from pathlib import Path
from suite.execute.forkclient import ForkServer
from suite.execute.launch import Step
argv, env, log, server_log = json.loads(sys.argv[1])
with ForkServer(sys.executable, env, Path(server_log)) as server:
    server(Step(argv, log_path=Path(log), timeout_s=600, env=env))
"""


def test_killing_the_parent_leaves_no_server_or_worker(env: dict[str, str], tmp_path: Path) -> None:
    pidfile = tmp_path / "pids"
    hang_env = {**env, "FORK_TEST_PIDFILE": str(pidfile)}
    argv = worker_argv(sys.executable, _spec("Hang"), tmp_path / "r.json", new_run_id(), 0)
    payload = json.dumps([argv, hang_env, str(tmp_path / "w.log"), str(tmp_path / "s.log")])
    parent = subprocess.Popen([sys.executable, "-c", PARENT, payload], env=env, cwd=REPO)
    try:
        worker, server, _ = _read_pids(pidfile)
        assert _alive(worker) and _alive(server)
    finally:
        parent.kill()
        parent.wait()
    _wait_until(lambda: not _alive(server), "the server to die with its parent")
    _wait_until(lambda: not _alive(worker), "the worker to die with its server")


def test_a_server_that_cannot_start_says_why(env: dict[str, str], tmp_path: Path) -> None:
    broken = tmp_path / "python"
    broken.write_text("#!/bin/sh\necho 'no torch in this interpreter' >&2\nexit 3\n")
    broken.chmod(0o755)
    server = ForkServer(str(broken), env, tmp_path / "server.log")
    argv = [str(broken), "-m", "suite.worker", "probe", "--out", str(tmp_path / "env.json")]
    with pytest.raises(EnvironmentProblem, match="no torch in this interpreter"):
        server(Step(argv, log_path=tmp_path / "probe.log", timeout_s=60, env=env))
    with pytest.raises(EnvironmentProblem, match="cannot start the fork server"):
        ForkServer(str(tmp_path / "absent"), env, tmp_path / "s.log")(
            Step(
                [str(tmp_path / "absent"), "-m", "suite.worker", "probe"],
                log_path=tmp_path / "p.log",
                timeout_s=60,
                env=env,
            ),
        )


def test_requests_round_trip_and_bad_ones_are_refused() -> None:
    request = Request(("cell", "--spec", "{}"), "/tmp/x.log", {"A": "1"}, None, 2**30)
    assert Request.from_line(request.to_line()) == request
    for bad in (b"[]", b'{"argv": "cell", "env": {}, "log": "x"}', b"not json"):
        with pytest.raises(ValueError):
            Request.from_line(bad)


def test_import_time_variables_are_told_apart_from_run_time_ones() -> None:
    env = {
        "OMP_NUM_THREADS": "4",
        "PYTHONPATH": "/x",
        "TORCH_LOGS": "+dynamo",
        "TORCH_MATRIX_FORK_SERVER": "1",
        "TORCHINDUCTOR_CACHE_DIR": "/cache",
        "CUDA_VISIBLE_DEVICES": "0",
    }
    assert set(import_time_env(env)) == {"OMP_NUM_THREADS", "PYTHONPATH", "TORCH_LOGS"}


@pytest.mark.parametrize(
    ("value", "platform", "expected"),
    [(None, "linux", True), ("0", "linux", False), (None, "darwin", False), ("1", "darwin", True)],
)
def test_fork_launcher_switch(
    value: str | None, platform: str, expected: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "platform", platform)
    environ = {} if value is None else {"TORCH_MATRIX_FORK_SERVER": value}
    assert fork_launcher_enabled(environ) is expected


@pytest.mark.slow
def test_a_wrapper_scripts_exports_reach_every_worker_with_the_fork_server_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A side given as a wrapper (conda activate, module load, LD_PRELOAD scripts) that exports a
    variable and execs Python: forked workers see it, as plainly started ones do."""
    from tests.plugins.wrapped import WRAPPED_VALUE, WRAPPED_VAR

    wrapper = tmp_path / "bin" / "python-wrapped"
    wrapper.parent.mkdir()
    wrapper.write_text(
        f'#!/bin/sh\nexport {WRAPPED_VAR}={WRAPPED_VALUE}\nexec {sys.executable} "$@"\n'
    )
    wrapper.chmod(0o755)
    monkeypatch.delenv(WRAPPED_VAR, raising=False)
    plugin = f"{Path(__file__).parent / 'plugins' / 'wrapped.py'}:Wrapped"
    for fork in ("1", "0"):
        monkeypatch.setenv("TORCH_MATRIX_FORK_SERVER", fork)
        out = tmp_path / f"run-fork-{fork}"
        code, _, stderr = cli(
            "run", "--python", str(wrapper), "--workload", plugin, "--backend", "cpu",
            "--out", str(out),
        )  # fmt: skip
        record = json.loads((out / "cells" / "wrapped@cpu.json").read_text())
        assert code == 0, (stderr, record.get("failure"))
        assert record["status"] == "ok"
        assert record["harness"]["forked"] is (fork == "1")  # the record says how it started
