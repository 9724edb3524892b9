"""The world as a matrix axis, the node launchers' settings, clean worker environments, and how
a cell on several nodes is judged from what its agents left (no torch, no namespaces)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from suite.core.errors import InputError
from suite.core.spec import CellSpec
from suite.execute.launch import ProcessExit
from suite.workloads.matrix import expand, load_matrix


def matrix(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "m.yaml"
    path.write_text("version: 1\nbackends: [cpu]\nworkloads:\n" + text)
    return path


def test_a_world_sweeps_nodes_and_ranks_and_the_cell_id_names_it(tmp_path: Path) -> None:
    cells, _ = expand(load_matrix(matrix(tmp_path, """\
  - workload: fsdp2
    world: {nodes: [1, 2], ranks_per_node: [2, 4]}
  - workload: collectives
    grid: {op: [broadcast], size: [1KiB], api: [c10d]}
    world: {nodes: [2]}
  - workload: checkpoint
    grid: {drop_optimizer_state: [false]}
""")))  # fmt: skip
    ids = [c.cell_id for c in cells]
    assert ids == [
        "fsdp2.true.d256.n1x2@cpu", "fsdp2.true.d256.n1x4@cpu", "fsdp2.true.d256.n2x2@cpu",
        "fsdp2.true.d256.n2x4@cpu", "collectives.broadcast.1KiB.c10d.n2x2@cpu",
        "checkpoint.false.d256.n1x2@cpu",
    ]  # fmt: skip
    assert [c.world_size for c in cells] == [2, 4, 4, 8, 4, 2]
    again = CellSpec.from_json(cells[3].to_json())
    assert again == cells[3] and again.as_dict()["world"] == {"nodes": 2, "ranks_per_node": 4}
    assert cells[3].spec_hash != cells[2].spec_hash


def test_a_single_process_workload_takes_no_world(tmp_path: Path) -> None:
    path = matrix(
        tmp_path, "  - workload: sdpa\n  - workload: mlp_train\n    world: {nodes: [2]}\n"
    )
    with pytest.raises(InputError) as caught:
        expand(load_matrix(path))
    assert caught.value.file == str(path) and caught.value.path == "$.workloads[1].world"
    assert "'mlp_train' runs in one process" in caught.value.detail


def test_a_world_of_zero_nodes_is_refused_by_the_schema(tmp_path: Path) -> None:
    path = matrix(tmp_path, "  - workload: fsdp2\n    world: {nodes: [0]}\n")
    with pytest.raises(InputError) as caught:
        load_matrix(path)
    assert "$.workloads[0].world.nodes[0]" in str(caught.value)


def test_plain_cells_keep_their_ids_and_hashes() -> None:
    plain = CellSpec("sdpa", "sdpa", (("mask", "causal"),), "cpu", "smoke", size_tag="s256")
    assert plain.cell_id == "sdpa.causal.s256@cpu" and "world" not in plain.as_dict()
    assert CellSpec.from_json(plain.to_json()) == plain


@pytest.mark.parametrize(
    ("launcher", "problem", "path"),
    [
        (
            "{kind: slurmish}",
            "'slurmish' is not one of ['local', 'ssh', 'slurm', 'kubernetes']",
            "$.launcher.kind",
        ),
        ("{kind: ssh}", "the ssh launcher needs hosts", "$.launcher"),
        ("{kind: local, hosts: [a]}", "launcher 'local' takes no 'hosts'", "$.launcher"),
        ("{kind: local, port: 0}", "0 is less than the minimum", "$.launcher.port"),
    ],
)
def test_a_launcher_that_cannot_work_is_an_input_error_naming_its_field(
    tmp_path: Path, launcher: str, problem: str, path: str
) -> None:
    from suite.execute.launchers import node_launcher

    file = matrix(tmp_path, f"  - workload: fsdp2\nlauncher: {launcher}\n")
    with pytest.raises(InputError) as caught:
        loaded = load_matrix(file)
        node_launcher(loaded.launcher, loaded.launcher_where)
    assert problem in str(caught.value) and str(file) in str(caught.value)
    assert path in str(caught.value)


def test_more_nodes_than_the_launcher_places_is_refused_before_anything_runs(
    tmp_path: Path,
) -> None:
    from tests.helpers import cli

    file = matrix(tmp_path, "  - workload: fsdp2\n    world: {nodes: [3]}\n"
                  "launcher: {kind: ssh, hosts: [a, b]}\n")  # fmt: skip
    code, _, err = cli("run", "--matrix", str(file), "--out", str(tmp_path / "out"))
    assert code == 2
    assert f"{file}::$.launcher: a cell of 3 nodes, but the ssh launcher places 2" in err
    assert not (tmp_path / "out").exists()


def test_the_launcher_option_takes_a_kind_or_a_checked_file(tmp_path: Path) -> None:
    from suite.execute.launchers import launcher_option

    assert launcher_option("local") == ({"kind": "local"}, {"option": "--launcher"})
    good = tmp_path / "ssh.yaml"
    good.write_text("kind: ssh\nhosts: [n0, n1]\nssh_options: [-p, '2222']\n")
    assert launcher_option(str(good))[0] == {
        "kind": "ssh", "hosts": ["n0", "n1"], "ssh_options": ["-p", "2222"]
    }  # fmt: skip
    bad = tmp_path / "bad.yaml"
    bad.write_text("kind: ssh\nhosts: 3\n")
    with pytest.raises(InputError) as caught:
        launcher_option(str(bad))
    assert f"{bad}" in str(caught.value) and "$.hosts" in str(caught.value)
    with pytest.raises(InputError, match="neither a launcher kind"):
        launcher_option(str(tmp_path / "absent.yaml"))


def test_a_worker_never_inherits_a_world() -> None:
    from suite.execute.environment import without_world

    env = {"RANK": "3", "WORLD_SIZE": "8", "PET_NNODES": "2", "TORCHELASTIC_RUN_ID": "x",
           "MASTER_ADDR": "h", "LOCAL_RANK": "1", "PATH": "/bin", "PETROL": "keep"}  # fmt: skip
    kept, cleared = without_world(env)
    assert kept == {"PATH": "/bin", "PETROL": "keep"}
    assert cleared == [
        "LOCAL_RANK", "MASTER_ADDR", "PET_NNODES", "RANK", "TORCHELASTIC_RUN_ID", "WORLD_SIZE"
    ]  # fmt: skip


def test_the_ssh_agent_carries_only_the_harness_environment_and_stops_with_its_input() -> None:
    from suite.execute.nodes import Agent, SshLauncher

    ssh = SshLauncher({"kind": "ssh", "hosts": ["u@n0", "n1"], "ssh_options": ["-p", "2222"]}, {})
    assert ssh.addresses(2) == ["n0", "n1"]
    env = {"PYTHONPATH": "/src", "TORCH_MATRIX_NODE": "1", "HOME": "/root", "GH_TOKEN": "x",
           "GLOO_SOCKET_IFNAME": "eth0"}  # fmt: skip
    argv, local_env = ssh.start_command(Agent(1, ["python3", "-m", "x"], env, Path("/r")))
    assert argv[:5] == ["ssh", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=accept-new"]
    assert argv[5:8] == ["-p", "2222", "n1"] and local_env is None
    remote = argv[8]
    assert "TORCH_MATRIX_NODE=1" in remote and "PYTHONPATH=/src" in remote
    assert "GLOO_SOCKET_IFNAME=eth0" in remote
    assert "HOME" not in remote and "GH_TOKEN" not in remote
    assert "exec 3<&0" in remote
    assert "( cat <&3 >/dev/null; kill -KILL -$agent ) >/dev/null 2>&1 &" in remote


class _Beats:
    """Heartbeats heard until `ended`, the moment the agents were told to stop."""

    def __init__(
        self, last: dict[int, float], ended: float, address: str = "10.0.0.254:4000"
    ) -> None:
        self.last, self.ended, self.address = last, ended, address


def _exit(code: int | None = 0, sig: str | None = None, late: bool = False) -> ProcessExit:
    return ProcessExit(code, sig, late, 1.0, None)


NAMES = ["node 0 (10.0.0.1)", "node 1 (10.0.0.2)"]


@pytest.mark.parametrize(
    ("exits", "last", "status", "mode", "said"),
    [
        ([_exit(None, late=True)] * 2, {0: 0.0, 1: -30.0}, "timeout", "timeout",
         "node 1 (10.0.0.2) stopped answering 30s before the end"),
        ([_exit(None, late=True)] * 2, {0: 0.0}, "timeout", "timeout",
         "node 1 (10.0.0.2) never answered"),
        ([_exit(None, late=True)] * 2, {0: 0.0, 1: 0.0}, "timeout", "timeout",
         "Every node answered until the end"),
        ([_exit(None, late=True)] * 2, {}, "timeout", "timeout",
         "No node's heartbeat reached the coordinator at 10.0.0.254:4000"),
        ([_exit(1), _exit(-9, "SIGKILL")], {}, "crashed", "signal",
         "node 1 (10.0.0.2): its agent was killed by SIGKILL"),
        ([_exit(1), _exit(0)], {}, "crashed", "exit-code",
         "node 0 (10.0.0.1): its agent exited with code 1"),
        ([_exit(0), _exit(0)], {}, "crashed", "no-result", "global rank 0 said no record"),
    ],
)  # fmt: skip
def test_a_cell_on_several_nodes_names_the_node_that_failed_it(
    exits: list[ProcessExit], last: dict[int, float], status: str, mode: str, said: str
) -> None:
    from suite.execute.multinode import _what_failed

    now = time.monotonic()
    # Judged at the stop, not later: the minute after it (the stop's grace) changes nothing.
    beats: Any = _Beats({n: now - 60 + t for n, t in last.items()}, ended=now - 60)
    got = _what_failed(["", ""], "R", exits, NAMES, beats, 60)
    assert got[:2] == (status, mode) and said in got[2], got


def test_a_rank_that_raised_on_another_node_gives_the_cell_its_status() -> None:
    from suite.core.wire import PART_MARK
    from suite.execute.multinode import _what_failed

    part = {"run_id": "R", "rank": 3, "status": "oom", "failure": "no memory", "mode": "oom"}
    texts = ["", f"{PART_MARK}{json.dumps(part)}\n"]
    got = _what_failed(
        texts, "R", [_exit(1), _exit(1)], NAMES, _Beats({}, ended=time.monotonic()), 60
    )  # type: ignore[arg-type]
    assert got == ("oom", "oom", "rank 3 on node 1 (10.0.0.2) oom: no memory")


def test_only_a_whole_valid_record_of_this_cell_is_taken() -> None:
    from suite.core.results import base_result
    from suite.core.wire import RECORD_MARK
    from suite.execute.multinode import _said_record

    spec = CellSpec("hold", "hold", (), "cpu", "smoke", ranks=2, nodes=2, distributed=True)
    doc = dict(base_result(spec, "R", 0, "2026-12-05T00:00:00Z"))
    doc.update(status="ok", finished_at="2026-12-05T00:00:01Z", wall_s=1.0)
    line = RECORD_MARK + json.dumps(doc)
    ok = [_exit(0), _exit(0)]
    assert _said_record(["", f"x\n{line}\n"], "R", spec.cell_id, ok) == doc
    assert _said_record([f"{line[:-20]}\n"], "R", spec.cell_id, ok) is None  # cut short
    assert _said_record([f"{line}\n"], "OTHER", spec.cell_id, ok) is None  # another run
    assert _said_record([f"{line}\n"], "R", spec.cell_id, [_exit(0), _exit(1)]) is None
    broken = RECORD_MARK + json.dumps({**doc, "status": "splendid"})
    assert _said_record([f"{broken}\n"], "R", spec.cell_id, ok) is None  # not a valid record


def test_each_cell_and_attempt_gets_its_own_rendezvous() -> None:
    from suite.execute.environment import RunOptions
    from suite.execute.multinode import agent_argv, rendezvous_id

    ids = {rendezvous_id("R", "fsdp2.true.d256.n2x2@cpu-0") for _ in range(50)}
    assert len(ids) == 50 and all(i.startswith("R.fsdp2.true.d256.n2x2@cpu-0.") for i in ids)
    spec = CellSpec("fsdp2", "fsdp2", (), "cpu", "smoke", ranks=2, nodes=2, distributed=True)
    options = RunOptions(out=Path("/o"), interpreter="py")
    args = [agent_argv(spec, options, Path("/o/c.json"), "R", 0, "10.0.0.1:29500", "ID", n,
                       f"10.0.0.{n + 1}", 30) for n in (0, 1)]  # fmt: skip
    for n, argv in enumerate(args):
        assert argv[:3] == ["py", "-m", "torch.distributed.run"]
        conf = argv[argv.index("--rdzv-conf") + 1]
        assert conf == f"is_host={'true' if n == 0 else 'false'},join_timeout=30"
        assert argv[argv.index("--rdzv-id") + 1] == "ID"
        assert argv[argv.index("--local-addr") + 1] == f"10.0.0.{n + 1}"
        assert argv[argv.index("--nnodes") + 1] == "2"
        assert argv[argv.index("--max-restarts") + 1] == "0"


@pytest.mark.parametrize(
    "name", sorted(p.name for p in (Path(__file__).parents[1] / "examples" / "matrices").glob("*"))
)
def test_every_example_matrix_loads_and_expands(name: str) -> None:
    from suite.execute.launchers import node_launcher

    loaded = load_matrix(Path(__file__).parents[1] / "examples" / "matrices" / name)
    cells, _ = expand(loaded)
    assert cells
    if loaded.launcher is not None:
        assert node_launcher(loaded.launcher, loaded.launcher_where).kind == loaded.launcher["kind"]


def test_the_multinode_example_runs_each_case_at_one_node_and_two() -> None:
    loaded = load_matrix(Path(__file__).parents[1] / "examples" / "matrices" / "multinode.yaml")
    ids = [c.cell_id for c in expand(loaded)[0]]
    assert "fsdp2.true.d256.n1x2@cpu" in ids and "fsdp2.true.d256.n2x2@cpu" in ids
