"""Every fixture file: valid ones pass, invalid ones fail naming file and JSON path (exit 2)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from suite.core.errors import InputError
from suite.core.validation import load_document, validate_file
from tests.helpers import TESTS, cli

VALID = sorted((TESTS / "fixtures" / "valid").iterdir())
INVALID = sorted(p for p in (TESTS / "fixtures" / "invalid").iterdir() if p.suffix != ".expect")


@pytest.mark.parametrize("path", VALID, ids=lambda p: p.name)
def test_valid_fixture(path: Path, tmp_path: Path) -> None:
    """It validates, as the kind it is; the same file with its required `workloads` field
    removed does not (so the pass is the schema's, not a check that accepts anything)."""
    assert validate_file(path) == "torch-matrix/matrix"
    doc = load_document(path)
    del doc["workloads"]
    broken = tmp_path / f"broken-{path.stem}.json"
    broken.write_text(json.dumps(doc))
    with pytest.raises(InputError) as info:
        validate_file(broken, "torch-matrix/matrix")
    assert info.value.file == str(broken) and "workloads" in str(info.value)


@pytest.mark.parametrize("path", INVALID, ids=lambda p: p.name)
def test_invalid_fixture_names_file_and_path(path: Path) -> None:
    json_path, fragment = path.with_suffix(".expect").read_text().rstrip("\n").split("\t")
    with pytest.raises(InputError) as info:
        validate_file(path)
    assert info.value.file == str(path)
    if json_path:
        assert info.value.path == json_path
    assert fragment in str(info.value)


@pytest.mark.parametrize("path", INVALID, ids=lambda p: p.name)
def test_cli_validate_invalid_exits_2_without_traceback(path: Path) -> None:
    code, out, err = cli("validate", str(path))
    assert code == 2
    assert "Traceback" not in out + err
    assert err.startswith(f"torch-matrix: error: {path}")


def test_cli_validate_run_directory(quick_run: Path) -> None:
    code, out, _ = cli("validate", str(quick_run))
    assert code == 0
    assert "(torch-matrix/run)" in out
    assert out.count("(torch-matrix/result)") == 4


def test_missing_file_is_input_error(tmp_path: Path) -> None:
    code, _, err = cli("validate", str(tmp_path / "nope.json"))
    assert code == 2
    assert "file not found" in err


def test_validate_reports_every_schema_error_of_a_file(tmp_path: Path) -> None:
    bad = tmp_path / "policy.json"
    profile = {"fleet_backends": "cpu", "gates": {"x": {"severity": "nope", "threshold": "a"}}}
    bad.write_text(
        json.dumps({"kind": "torch-matrix/policy", "version": 1, "profiles": {"p": profile}})
    )
    code, _, stderr = cli("validate", str(bad))
    assert code == 2
    lines = [line for line in stderr.splitlines() if line.startswith("torch-matrix: error:")]
    assert [line.split("::", 1)[1].split(":", 1)[0] for line in lines] == [
        "$.profiles.p.fleet_backends",
        "$.profiles.p.gates.x.severity",
        "$.profiles.p.gates.x.threshold",
    ]
    assert all(f"{bad}::" in line for line in lines)
