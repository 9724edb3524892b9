"""Each vocabulary is one registry and everything else is read from it: a backend and a report
format added at run time show up in the CLI's choices, pass the schemas' checks, get a row in
the README's generated tables and are planned, given devices and probed — and the files'
own lists stay equal to the built-in entries, for tools that read the schemas directly."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from suite.cli.main import main as cli
from suite.cli.reference import reference
from suite.core.backends import (
    BackendEntry,
    DeviceAccess,
    backend_names,
    image_backends,
    register_backend,
    unregister_backend,
)
from suite.core.errors import SchemaErrors
from suite.core.validation import REGISTRIES, validate
from suite.execute.devices import device_flags
from suite.flows.plan import runner_labels, unplanned, unplanned_note
from suite.report import format_names, register_format, render, unregister_format
from suite.workloads.matrix import load_matrix
from tests.helpers import REPO

NPU = BackendEntry(
    name="npu",
    runtime="tests.plugins.fake_backend:NpuBackend",
    image="images/npu",
    runner_labels=("self-hosted", "linux", "npu"),
    devices=DeviceAccess(nodes=("/dev/npu0",), groups=("npu",)),
    detected="an NPU driver answers",
    memory="the NPU allocator's peak",
    sync="`torch.npu.synchronize`",
    runner_needs="the NPU driver, `/dev/npu0`",
)


@pytest.fixture
def npu() -> Iterator[BackendEntry]:
    register_backend(NPU)
    try:
        yield NPU
    finally:
        unregister_backend(NPU.name)


@pytest.fixture
def csv_format() -> Iterator[str]:
    register_format("csv", lambda d: f"decision,{d['decision']}\n", "one line: decision,VERDICT")
    try:
        yield "csv"
    finally:
        unregister_format("csv")


def _marked(node: Any) -> Iterator[tuple[str, list[str]]]:
    if isinstance(node, dict):
        if "x-registry" in node:
            yield node["x-registry"], node.get("enum", node.get("required"))
        for value in node.values():
            yield from _marked(value)
    elif isinstance(node, list):
        for value in node:
            yield from _marked(value)


def test_every_schema_list_of_a_registry_equals_its_built_in_entries() -> None:
    found = []
    for path in sorted((REPO / "schemas").glob("*.schema.json")):
        for registry, names in _marked(json.loads(path.read_text("utf-8"))):
            assert names == list(REGISTRIES[registry]()), (path.name, registry)
            found.append(path.name)
    assert sorted(set(found)) == [
        "environment.schema.json",
        "image.schema.json",
        "matrix.schema.json",
        "policy.schema.json",
        "result.schema.json",
    ]
    assert backend_names() == ("cpu", "cuda", "rocm", "mps")
    assert image_backends() == ("cpu", "cuda", "rocm")


def _help(*args: str) -> str:
    result = CliRunner().invoke(cli, [*args, "--help"])
    assert result.exit_code == 0, result.output
    return result.output


def test_a_backend_registered_at_run_time_is_a_choice_of_every_command(npu: BackendEntry) -> None:
    for command in (("ab",), ("run",), ("plan",), ("calibrate",)):
        assert "cpu|cuda|rocm|mps|npu" in _help(*command), command
    assert "cpu|cuda|rocm|npu]" in _help("image", "build")


def test_without_its_entry_the_backend_is_refused_by_the_cli_and_the_schema(
    tmp_path: Path,
) -> None:
    assert "|mps]" in _help("ab") and "npu" not in backend_names()
    result = CliRunner().invoke(cli, ["run", "--backend", "npu", "--out", str(tmp_path / "r")])
    assert result.exit_code == 2 and "'npu' is not one of" in result.output
    with pytest.raises(SchemaErrors, match="npu"):
        validate(_matrix_doc(), "torch-matrix/matrix", file="m.yaml")


def _matrix_doc() -> dict[str, Any]:
    return {
        "version": 1,
        "kind": "torch-matrix/matrix",
        "backends": ["cpu", "npu"],
        "workloads": [{"workload": "linear_cross_entropy"}],
    }


def test_a_backend_registered_at_run_time_passes_the_schemas(
    npu: BackendEntry, tmp_path: Path
) -> None:
    validate(_matrix_doc(), "torch-matrix/matrix", file="m.yaml")
    matrix_file = tmp_path / "m.json"
    matrix_file.write_text(json.dumps(_matrix_doc()))
    assert load_matrix(matrix_file).backends == ("cpu", "npu")


def test_a_backend_registered_at_run_time_is_planned_given_devices_and_probed(
    npu: BackendEntry, tmp_path: Path
) -> None:
    matrix_file = tmp_path / "m.json"
    matrix_file.write_text(json.dumps(_matrix_doc()))
    matrix = load_matrix(matrix_file)
    assert runner_labels(matrix, "npu") is None  # not planned by default: a hint instead
    from suite.workloads.matrix import expand

    cells, _ = expand(matrix)
    counts = unplanned(matrix, cells)
    assert set(counts) == {"npu"}
    assert "npu: [self-hosted, linux, npu]" in unplanned_note(counts)
    assert device_flags("npu") == ["--device", "/dev/npu0", "--group-add", "npu"]
    from suite.worker.backends import get

    assert get("npu").probe().reason == "no NPU here (a test's backend)"
    assert get("npu").name == "npu"
    from suite.core.spec import countable

    # Not a host backend: its instructions are not the host's to count (the CPU's are).
    assert not countable("mlp_train", "npu", {}) and countable("mlp_train", "cpu", {})


def test_a_backend_and_a_format_registered_at_run_time_get_their_rows_in_the_docs(
    npu: BackendEntry, csv_format: str
) -> None:
    text = reference()
    assert "| `npu` | an NPU driver answers | the NPU allocator's peak |" in text
    assert "| `npu` | the NPU driver, `/dev/npu0` | **untested on hardware** |" in text
    assert "| `csv` | one line: decision,VERDICT |" in text
    assert "`--format` [table\\|markdown\\|json\\|junit\\|csv]" in text


def test_a_format_registered_at_run_time_is_a_choice_and_renders(csv_format: str) -> None:
    assert "table|markdown|json|junit|csv" in _help("compare")
    assert render({"decision": "adopt"}, "csv") == "decision,adopt\n"
    assert format_names()[-1] == "csv"


def test_an_unregistered_format_is_refused_naming_the_registered_ones() -> None:
    from suite.core.errors import InputError

    with pytest.raises(InputError, match="expected one of table, markdown, json, junit"):
        render({"decision": "adopt"}, "csv")
