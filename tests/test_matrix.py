"""Matrix expansion and its errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from suite.core.errors import InputError
from suite.workloads.matrix import expand, load_matrix, select, select_cells
from tests.helpers import cli, planted


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "m.yaml"
    path.write_text(text)
    return path


def test_grid_expands_in_declared_order(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        f"version: 1\nbackends: [cpu, mps]\nworkloads:\n"
        f"  - workload: '{planted('Quick')}'\n    grid: {{n: [32, 8]}}\n",
    )
    cells, _ = expand(load_matrix(path))
    assert [c.cell_id for c in cells] == [
        "quick.32@cpu",
        "quick.32@mps",
        "quick.8@cpu",
        "quick.8@mps",
    ]


def test_default_grid_when_unnamed(tmp_path: Path) -> None:
    path = _write(
        tmp_path, f"version: 1\nbackends: [cpu]\nworkloads:\n  - workload: '{planted('Quick')}'\n"
    )
    cells, _ = expand(load_matrix(path))
    assert [c.cell_id for c in cells] == ["quick.8@cpu", "quick.16@cpu"]


def test_unknown_param_value_names_path(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        f"version: 1\nworkloads:\n  - workload: sdpa\n"
        f"  - workload: '{planted('Quick')}'\n    grid: {{n: [8, 9]}}\n",
    )
    with pytest.raises(InputError) as info:
        expand(load_matrix(path))
    assert info.value.file == str(path)
    assert info.value.path == "$.workloads[1].grid.n[1]"
    code, _, err = cli("run", "--matrix", str(path))
    assert code == 2 and "$.workloads[1].grid.n[1]" in err and "Traceback" not in err


def test_unknown_param_name_names_path(tmp_path: Path) -> None:
    path = _write(tmp_path, "version: 1\nworkloads:\n  - workload: sdpa\n    grid: {seqlen: [1]}\n")
    with pytest.raises(InputError) as info:
        expand(load_matrix(path))
    assert info.value.path == "$.workloads[0].grid.seqlen"


def test_unknown_workload_names_path(tmp_path: Path) -> None:
    path = _write(
        tmp_path, "version: 1\nworkloads:\n  - workload: sdpa\n  - workload: warp_drive\n"
    )
    with pytest.raises(InputError) as info:
        expand(load_matrix(path))
    assert info.value.path == "$.workloads[1].workload"


def test_default_matrix_has_every_builtin() -> None:
    cells, resolved = expand(load_matrix(None))
    assert set(resolved) == {
        "flex_attention", "sdpa", "linear_cross_entropy", "mlp_train",
        "collectives", "fsdp2", "checkpoint", "recovery",
    }  # fmt: skip
    ids = {c.cell_id for c in cells}
    assert "flex_attention.causal.none.eager.fp32.fwd_bwd.s512@cpu" in ids
    # Every default decision has distributed evidence: two gloo ranks on this host.
    distributed = {c.cell_id for c in cells if c.distributed and c.backend == "cpu"}
    assert distributed == {
        "collectives.all_reduce.1MiB.c10d.n1x2@cpu",
        "collectives.all_reduce.1MiB.torchcomms.n1x2@cpu",
        "fsdp2.true.d256.n1x2@cpu",
        "fsdp2.false.d256.n1x2@cpu",
        "checkpoint.false.d256.n1x2@cpu",
        "recovery.kill_rank.none.d256.n1x2@cpu",
    }
    assert {c.backend for c in cells} == {"cpu", "cuda", "rocm", "mps"}
    assert len(ids) == len(cells)


def test_select_filters_and_adds(tmp_path: Path) -> None:
    matrix = select(load_matrix(None), ["sdpa", planted("Quick")], ["cpu"], "full")
    cells, _ = expand(matrix)
    assert {c.workload for c in cells} == {"sdpa", "quick"}
    assert {c.backend for c in cells} == {"cpu"} and {c.profile for c in cells} == {"full"}


def test_size_is_the_problem_size_and_profile_its_deprecated_spelling(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    body = "version: 1\nworkloads:\n  - workload: sdpa\n"
    new, old, both = (tmp_path / n for n in ("new.yaml", "old.yaml", "both.yaml"))
    new.write_text(f"size: full\n{body}")
    old.write_text(f"profile: full\n{body}")
    both.write_text(f"size: smoke\nprofile: full\n{body}")
    assert load_matrix(new).profile == "full" and "deprecated" not in capsys.readouterr().err
    assert load_matrix(old).profile == "full"
    warned = capsys.readouterr().err
    assert f"{old}::$.profile is deprecated" in warned and "write `size: full`" in warned
    with pytest.raises(InputError) as info:
        load_matrix(both)
    assert info.value.path == "$.profile"


def test_run_profile_still_works_with_a_warning(tmp_path: Path) -> None:
    code, _, stderr = cli(
        "run", "--workload", planted("Quick"), "--cell", "quick.8@cpu", "--profile", "smoke",
        "--out", str(tmp_path / "r"),
    )  # fmt: skip
    assert code == 0, stderr
    assert "run --profile smoke is deprecated for the problem size: use --size smoke" in stderr


def test_a_cell_outside_the_default_sweep_can_be_named() -> None:
    default = {c.cell_id for c in select_cells(None, ["sdpa"], ["cpu"], [], None)[1]}
    wanted = "sdpa.causal.bf16.fwd_bwd.s256@cpu"  # fwd_bwd: a value sdpa declares, not swept
    assert wanted not in default
    _, cells, _ = select_cells(None, [], [], [wanted, "sdpa.causal.fp32.fwd.s256@cpu"], None)
    assert [c.cell_id for c in cells] == [wanted, "sdpa.causal.fp32.fwd.s256@cpu"]
    assert dict(cells[0].params)["pass"] == "fwd_bwd"
    with pytest.raises(InputError, match="nor among the other values its workloads declare"):
        select_cells(None, [], [], ["sdpa.causal.fp8.fwd.s256@cpu"], None)
