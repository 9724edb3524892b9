"""Docker sides without a Docker daemon: exit-code mapping, what ContainerLauncher asks the SDK
for (through a fake client), the `docker run` line as a shell parses it, and `repro` on
synthetic runs."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from suite.cli.repro import repro
from suite.core.errors import EnvironmentProblem
from suite.execute.docker import ContainerLauncher, docker_run_line, exit_status, forwarded_env
from suite.execute.launch import Step
from suite.execute.mounts import collapse, mounts_for, uncovered
from suite.execute.sides import parse
from tests.synthetic import ENV, Cell, make_run

DIGEST = "sha256:" + "ab" * 32


class FakeContainer:
    def __init__(self, status: int = 0, oom: bool = False, hang: bool = False) -> None:
        self.id = "c0ffee" * 10
        self.status, self.oom, self.hang = status, oom, hang
        self.calls: list[str] = []
        self.attrs: dict[str, Any] = {}

    def start(self) -> None:
        self.calls.append("start")

    def wait(self, timeout: float) -> dict[str, int]:
        self.calls.append("wait")
        if self.hang:
            time.sleep(timeout)
            raise TimeoutError("read timed out")
        return {"StatusCode": self.status}

    def stop(self, timeout: int) -> None:
        self.calls.append("stop")

    def logs(self, **kwargs: Any) -> list[bytes]:
        return [b"worker output\n", b"worker error\n"]

    def reload(self) -> None:
        self.attrs = {"State": {"OOMKilled": self.oom}}

    def remove(self, force: bool) -> None:
        self.calls.append("remove")


class FakeClient:
    def __init__(self, container: FakeContainer) -> None:
        self.container = container
        self.created: dict[str, Any] = {}
        self.containers = self

    def create(self, image: str, **options: Any) -> FakeContainer:
        self.created = {"image": image, **options}
        return self.container


def launch(
    tmp_path: Path, container: FakeContainer, timeout_s: float = 5.0, **kwargs: Any
) -> tuple[Any, FakeClient, Path]:
    client = FakeClient(container)
    launcher = ContainerLauncher(
        image=DIGEST,
        reference="torch-matrix/cpu:test",
        digest=DIGEST,
        base="python:3.11-slim",
        client_factory=lambda: client,
        **kwargs,
    )
    run_dir = tmp_path / "run"
    argv = ["python", "-m", "suite.worker", "cell", "--spec", "{}"]
    argv += ["--result", str(run_dir / "cells" / "x@cpu.json"), "--path", "/host/cwd"]
    log = run_dir / "logs" / "x@cpu.log"
    env = {
        "PATH": "/host/bin",
        "HOME": "/root",
        "PYTHONPATH": "/tmp/torch-matrix-src",
        "TORCH_LOGS": "+dynamo",
        "HF_TOKEN": "secret",
        "TORCH_API_KEY": "secret",
        "MALLOC_MMAP_THRESHOLD_": "131072",
        "TORCHINDUCTOR_CACHE_DIR": str(run_dir / ".inductor-cache" / "x@cpu"),
    }
    outcome = launcher(
        Step(argv, log_path=log, timeout_s=timeout_s, env=env, memory_limit_bytes=2**30)
    )
    return outcome, client, log


@pytest.mark.parametrize(
    ("code", "oom", "expected"),
    [
        (0, False, (0, None)),
        (1, False, (1, None)),
        (139, False, (-signal.SIGSEGV, "SIGSEGV")),
        (137, False, (-signal.SIGKILL, "SIGKILL")),
        (134, False, (-signal.SIGABRT, "SIGABRT")),
        (1, True, (-signal.SIGKILL, "SIGKILL")),
    ],
)
def test_exit_status_maps_like_run_process(code: int, oom: bool, expected: tuple[int, Any]) -> None:
    assert exit_status(code, oom) == expected


def test_launcher_runs_the_worker_argv_in_a_contained_container(tmp_path: Path) -> None:
    container = FakeContainer(status=0)
    outcome, client, log = launch(tmp_path, container)
    assert outcome.returncode == 0 and not outcome.timed_out and outcome.signal_name is None
    made = client.created
    assert made["image"] == DIGEST
    assert made["entrypoint"] == ["python"] and made["command"][:2] == ["-m", "suite.worker"]
    assert made["network_mode"] == "none"
    assert made["user"] == f"{os.getuid()}:{os.getgid()}"
    assert made["init"] is True
    assert made["mem_limit"] == 2**30 == made["memswap_limit"]
    run_dir = str(tmp_path / "run")
    assert made["volumes"] == {run_dir: {"bind": run_dir, "mode": "rw"}}
    env = made["environment"]
    assert "PATH" not in env and "PYTHONPATH" not in env
    assert "HF_TOKEN" not in env and "TORCH_API_KEY" not in env
    assert env["HOME"] == "/tmp" and env["TORCH_LOGS"] == "+dynamo"
    assert env["TORCH_MATRIX_IMAGE"] == "torch-matrix/cpu:test"
    assert env["TORCH_MATRIX_IMAGE_DIGEST"] == DIGEST
    assert env["TORCH_MATRIX_IMAGE_BASE"] == "python:3.11-slim"
    assert "device_requests" not in made and "devices" not in made
    assert log.read_bytes() == b"worker output\nworker error\n"
    assert container.calls == ["start", "wait", "remove"]


def test_launcher_reports_signals_oom_and_timeouts(tmp_path: Path) -> None:
    outcome, _, _ = launch(tmp_path / "segv", FakeContainer(status=139))
    assert (outcome.returncode, outcome.signal_name) == (-11, "SIGSEGV")
    outcome, _, _ = launch(tmp_path / "oom", FakeContainer(status=137, oom=True))
    assert outcome.signal_name == "SIGKILL" and outcome.maxrss_bytes == 2**30
    hung = FakeContainer(hang=True)
    outcome, _, _ = launch(tmp_path / "hang", hung, timeout_s=0.2)
    assert outcome.timed_out and outcome.returncode is None
    assert hung.calls == ["start", "wait", "stop", "remove"]


def test_launcher_removes_the_container_when_start_fails(tmp_path: Path) -> None:
    class Broken(FakeContainer):
        def start(self) -> None:
            raise RuntimeError("no such device")

    broken = Broken()
    with pytest.raises(RuntimeError):
        launch(tmp_path, broken)
    assert broken.calls == ["remove"]


def test_device_options_by_backend(tmp_path: Path) -> None:
    _, client, _ = launch(tmp_path / "cuda", FakeContainer(), backend="cuda")
    (request,) = client.created["device_requests"]
    assert request["Count"] == -1 and request["Capabilities"] == [["gpu"]]
    _, client, _ = launch(tmp_path / "rocm", FakeContainer(), backend="rocm")
    assert client.created["devices"] == ["/dev/kfd:/dev/kfd:rwm", "/dev/dri:/dev/dri:rwm"]
    assert "video" in client.created["group_add"]


def test_mounts_cover_what_each_step_reads_and_writes(tmp_path: Path) -> None:
    plugins = tmp_path / "team"
    plugins.mkdir()
    (plugins / "bench.py").write_text("")
    spec = json.dumps({"ref": f"{plugins}/bench.py:TeamBench", "backend": "cpu"})
    run = tmp_path / "run"
    worker = ["python", "-m", "suite.worker", "cell", "--spec", spec]
    worker += ["--result", str(run / "cells" / "a@cpu.json"), "--path", "/host/cwd"]
    assert mounts_for(worker) == {str(run): "rw", str(plugins): "ro"}
    assert mounts_for([*worker, "--trace", str(tmp_path / "traces" / "a.json")]) == {
        str(run): "rw",
        str(plugins): "ro",
        str(tmp_path / "traces"): "rw",
    }
    folder = run / "rollback" / "written-by-candidate"
    write = ["python", "-m", "suite.worker.rollback", "write", "--into", str(folder)]
    assert mounts_for(write, create=True) == {str(folder): "rw"} and folder.is_dir()
    report = run / "rollback" / "candidate-to-baseline.json"
    read = ["python", "-m", "suite.worker.rollback", "read", "--from", str(folder)]
    assert mounts_for([*read, "--report", str(report)]) == {str(run / "rollback"): "rw"}
    matrix = tmp_path / "m.yaml"
    repro = ["torch-matrix", "run", f"--matrix={matrix}", "--workload", f"{plugins}/bench.py:X"]
    repro += ["--out", str(run / "repro" / "a@cpu" / "r1")]
    assert mounts_for(repro) == {
        str(matrix): "ro",
        str(plugins): "ro",
        str(run / "repro" / "a@cpu"): "rw",
    }
    # Relative paths count from the step's working directory.
    relative = ["torch-matrix", "run", "--workload", "team/bench.py:X", "--out", "o/r"]
    assert mounts_for(relative, cwd=tmp_path) == {str(plugins): "ro", str(tmp_path / "o"): "rw"}
    assert mounts_for(worker, {"TORCHINDUCTOR_CACHE_DIR": str(run / ".ind" / "a")}) == {
        str(run): "rw",
        str(plugins): "ro",
    }
    # A cache directly in /tmp (the user's own, say) is mounted alone, never /tmp whole.
    step = ["torch-matrix", "env"]
    assert mounts_for(step, {"TORCHINDUCTOR_CACHE_DIR": "/tmp/my-inductor"}) == {
        "/tmp/my-inductor": "rw"
    }
    home_cache = str(Path.home() / "inductor")
    assert mounts_for(step, {"TORCHINDUCTOR_CACHE_DIR": home_cache}) == {home_cache: "rw"}
    assert collapse({"/r": "rw", "/r/run": "rw", "/m": "ro", "/m/out": "rw"}) == {
        "/m": "ro",
        "/m/out": "rw",
        "/r": "rw",
    }


def test_a_plugin_directly_in_a_shared_folder_is_mounted_alone(tmp_path: Path) -> None:
    argv = ["torch-matrix", "run", "--workload", "/tmp/bench.py:X"]
    assert mounts_for(argv) == {"/tmp/bench.py": "ro"}  # /tmp is the container's HOME
    home = Path.home() / "bench.py"
    assert mounts_for(["run", "--workload", f"{home}:X"]) == {str(home): "ro"}


def test_a_host_path_no_mount_covers_is_refused(tmp_path: Path) -> None:
    stray = tmp_path / "stray.json"
    stray.write_text("{}")
    argv = ["python", "-m", "suite.worker", "cell", "--config", str(stray)]
    assert uncovered(argv, mounts_for(argv)) == [str(stray)]
    assert uncovered([*argv[:-2], "--path", str(tmp_path)], {}) == []  # sys.path only
    client = FakeClient(FakeContainer())
    launcher = ContainerLauncher(image=DIGEST, client_factory=lambda: client)
    with pytest.raises(EnvironmentProblem, match="no mount covers"):
        launcher(Step(argv, log_path=tmp_path / "log", timeout_s=5.0))
    assert client.created == {}  # refused before any container exists


def test_forwarded_env_drops_secrets_and_host_layout() -> None:
    env = {"TORCH_X": "1", "CUDA_VISIBLE_DEVICES": "0", "GITHUB_TOKEN": "t", "PATH": "/bin"}
    env |= {"TORCH_MATRIX_CACHE": "/host/cache", "NCCL_SECRET_KEY": "k", "OMP_NUM_THREADS": "2"}
    env |= {"PYTORCH_REDACTED": "<redacted>"}
    assert forwarded_env(env) == {
        "CUDA_VISIBLE_DEVICES": "0",
        "OMP_NUM_THREADS": "2",
        "TORCH_X": "1",
    }


def _shell_words(line: str) -> list[str]:
    """The words a shell passes to `docker` for this line (docker replaced by a printer)."""
    script = "docker() { printf '%s\\0' \"$@\"; }; " + line
    out = subprocess.run(["bash", "-c", script], capture_output=True, check=True).stdout
    return out.decode().split("\0")[:-1]


def test_docker_run_line_survives_the_shell(tmp_path: Path) -> None:
    odd = tmp_path / "dir with space's"
    argv = ["torch-matrix", "run", "--cell", "a.b@cpu", "--out", str(odd / "out")]
    env = {"TORCH_LOGS": "+dynamo,graph", "HF_TOKEN": "nope", "TORCH_MATRIX_IMAGE": "img;rm -rf /"}
    line = docker_run_line(DIGEST, "rocm", argv, env, {str(odd): "rw", "/m": "ro"})
    words = _shell_words(line)
    assert words[:2] == ["run", "--rm"]
    assert words[words.index("--network") + 1] == "none"
    assert f"{odd}:{odd}" in words and "/m:/m:ro" in words
    assert "TORCH_LOGS=+dynamo,graph" in words and "TORCH_MATRIX_IMAGE=img;rm -rf /" in words
    assert not any("HF_TOKEN" in w for w in words)
    assert words[words.index("--user") + 1] == f"{os.getuid()}:{os.getgid()}"
    assert words[words.index("--device") : words.index("--device") + 6] == [
        "--device",
        "/dev/kfd",
        "--device",
        "/dev/dri",
        "--group-add",
        "video",
    ]
    assert words[-len(argv) :] == [DIGEST, *argv[1:]]
    assert "--gpus" in _shell_words(docker_run_line(DIGEST, "cuda", argv, {}, {}))
    assert shlex.split(line)  # also well-formed for a reader that does not run it


def test_parse_knows_docker_sides() -> None:
    assert parse("docker:torch-matrix/cpu:torch-2.13.0", "candidate") == "docker"


def _image_env() -> dict[str, Any]:
    env = json.loads(json.dumps(ENV))
    env["image"] = {"reference": "torch-matrix/cpu:test", "digest": DIGEST}
    env["env_vars"] = {"TORCH_LOGS": "+dynamo", "MALLOC_MMAP_THRESHOLD_": "131072"}
    return env


def test_repro_prints_a_docker_line_for_an_image_run(tmp_path: Path) -> None:
    failing = Cell(status="timeout", failure_mode="timeout", message="no result")
    make_run(
        tmp_path / "ab" / "candidate",
        [failing],
        run_id="20261130T100000Z-00000c",
        rounds=1,
        env=_image_env(),
    )
    make_run(tmp_path / "ab" / "baseline", [failing], run_id="20261130T100000Z-00000b", rounds=1)
    result = CliRunner().invoke(repro, [failing.cell_id, "--results", str(tmp_path / "ab")])
    assert result.exit_code == 0, result.output
    assert "candidate/" in result.stderr
    words = _shell_words(result.stdout.strip())
    assert DIGEST in words and "--network" in words
    # The suite sets no allocator variable of its own: one the user had is theirs to keep.
    assert "TORCH_LOGS=+dynamo" in words and "MALLOC_MMAP_THRESHOLD_=131072" in words
    args = words[words.index(DIGEST) + 1 :]
    assert args[:1] == ["run"] and args[args.index("--cell") + 1] == failing.cell_id
    out = Path(args[args.index("--out") + 1])
    # Beside the candidate's records, as the decision's line: one line everywhere.
    assert out.parent == (tmp_path / "ab" / "candidate" / "repro" / failing.cell_id).absolute()
    assert not out.exists()  # printing runs nothing


def test_repro_prints_a_plain_line_without_an_image(tmp_path: Path) -> None:
    cell = Cell()
    make_run(tmp_path / "run", [cell], run_id="20261130T100000Z-00000a", rounds=1)
    result = CliRunner().invoke(repro, [cell.cell_id, "--results", str(tmp_path / "run")])
    assert result.exit_code == 0, result.output
    words = shlex.split(result.stdout.strip())
    assert words[:2] == ["torch-matrix", "run"] and words[words.index("--python") + 1] == (
        "/usr/bin/python3"
    )


def test_repro_unknown_cell_names_file_and_argument(tmp_path: Path) -> None:
    make_run(tmp_path / "run", [Cell()], run_id="20261130T100000Z-00000a", rounds=1)
    result = CliRunner().invoke(repro, ["w.b@cpu", "--results", str(tmp_path / "run")])
    assert result.exit_code == 2
    assert f"CELL_ID {tmp_path / 'run' / 'run.json'}: no cell 'w.b@cpu'" in result.stderr
    assert "did you mean w.a@cpu" in result.stderr


def test_sdk_options_and_the_pasted_line_give_the_same_devices(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import suite.execute.devices as docker_side
    from suite.core.backends import DeviceAccess

    rocm = DeviceAccess(nodes=("/dev/kfd", "/dev/dri"), groups=("video", "109"))
    monkeypatch.setattr(docker_side, "devices", lambda backend: rocm)
    options = docker_side.device_options("rocm")
    assert options == {
        "devices": ["/dev/kfd:/dev/kfd:rwm", "/dev/dri:/dev/dri:rwm"],
        "group_add": ["video", "109"],
    }
    words = _shell_words(docker_run_line(DIGEST, "rocm", ["torch-matrix", "env"], {}))
    assert [words[i + 1] for i, w in enumerate(words) if w == "--group-add"] == ["video", "109"]
    assert [words[i + 1] for i, w in enumerate(words) if w == "--device"] == [
        "/dev/kfd",
        "/dev/dri",
    ]
    monkeypatch.setattr(docker_side, "devices", lambda backend: DeviceAccess(gpus=True))
    (request,) = docker_side.device_options("cuda")["device_requests"]
    assert request["Capabilities"] == [["gpu"]]
    assert "--gpus all" in docker_run_line(DIGEST, "cuda", ["torch-matrix", "env"], {})
