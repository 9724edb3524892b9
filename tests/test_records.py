"""The vocabulary of the records is defined once (suite/core/records.py): each Literal there
holds exactly the values its schema allows, and each record type names exactly the fields its
schema describes (the schema's required ones among them), so neither can drift from the other."""

from __future__ import annotations

import json
from typing import Any

import pytest

from suite.core import decision_records as judged
from suite.core import records
from tests.helpers import REPO


def _schema(name: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((REPO / "schemas" / f"{name}.schema.json").read_text())
    return doc


@pytest.mark.parametrize(
    ("values", "schema", "path"),
    [
        (records.STATUSES, "result", ("properties", "status")),
        (
            records.FAILURE_MODES,
            "result",
            ("properties", "failure", "oneOf", 1, "properties", "mode"),
        ),
        (records.RUN_STATUSES, "run", ("properties", "status")),
        (
            ("pending", *records.STATUSES),
            "run",
            ("properties", "cells", "items", "properties", "status"),
        ),
        (records.VERDICTS, "decision", ("$defs", "verdict")),
        (records.DECISIONS, "decision", ("$defs", "decision")),
        (records.VERDICTS, "policy", ("$defs", "verdict")),
        (records.DECISIONS, "policy", ("$defs", "decision")),
        (records.SEVERITIES, "policy", ("$defs", "severity")),
        (records.LANES, "decision", ("properties", "cells", "items", "properties", "lane")),
        (records.SIZES, "matrix", ("properties", "size")),
    ],
)
def test_each_literal_holds_what_its_schema_allows(
    values: tuple[str, ...], schema: str, path: tuple[str | int, ...]
) -> None:
    node: Any = _schema(schema)
    for key in path:
        node = node[key]
    assert list(values) == node["enum"]


def test_undecided_causes_and_exit_codes_cover_their_vocabularies() -> None:
    node = _schema("decision")["properties"]["cells"]["items"]["properties"]["gates"]["items"]
    assert [*records.UNDECIDED_WHY, None] == node["properties"]["undecided"]["enum"]
    assert set(records.EXIT_CODES) == set(records.DECISIONS)
    assert set(records.FAILED_STATUSES) < set(records.STATUSES)


_RECORD_TYPES: list[tuple[Any, str, tuple[str | int, ...]]] = [
    (records.Result, "result", ()),
    (records.Failure, "result", ("properties", "failure", "oneOf", 1)),
    (records.TorchInfo, "result", ("properties", "torch")),
    (records.SourceRecord, "result", ("properties", "source")),
    (records.TimingRecord, "result", ("properties", "timing")),
    (records.Disturbance, "result", ("properties", "timing", "properties", "disturbance")),
    (records.NoiseRecord, "result", ("properties", "noise")),
    (records.ThroughputRecord, "result", ("properties", "throughput")),
    (records.MemoryRecord, "result", ("properties", "memory")),
    (records.Correctness, "result", ("properties", "correctness")),
    (records.FallbackRecord, "result", ("properties", "fallback")),
    (records.HarnessRecord, "result", ("properties", "harness")),
    (records.ThreadsRecord, "result", ("properties", "threads")),
    (records.ProcessRecord, "result", ("properties", "process")),
    (records.RunRecord, "run", ()),
    (records.RunCell, "run", ("properties", "cells", "items")),
    (records.ImageRecord, "run", ("properties", "image")),
    (records.MatrixEvidence, "run", ("properties", "matrix")),
    (judged.DecisionRecord, "decision", ()),
    (judged.SideEvidence, "decision", ("properties", "baseline")),
    (judged.PolicyEvidence, "decision", ("properties", "policy")),
    (judged.Comparable, "decision", ("properties", "comparable")),
    (judged.RollbackRecord, "decision", ("properties", "rollback")),
    (judged.Source, "decision", ("properties", "source")),
    (judged.Row, "decision", ("properties", "rows", "items")),
    (judged.Cell, "decision", ("properties", "cells", "items")),
    (
        judged.GateRecord,
        "decision",
        ("properties", "cells", "items", "properties", "gates", "items"),
    ),
    (judged.Repro, "decision", ("properties", "cells", "items", "properties", "repro")),
    (judged.CalibrationRecord, "calibration", ()),
    (judged.RunnerIdentity, "calibration", ("properties", "runner")),
    (judged.CalibrationCell, "calibration", ("properties", "cells", "items")),
]


def _node(schema: dict[str, Any], path: tuple[str | int, ...]) -> dict[str, Any]:
    """The schema node at PATH, with a local $ref followed."""
    node: Any = schema
    for key in path:
        node = node[key]
    while "$ref" in node:
        ref = node["$ref"]
        assert ref.startswith("#/"), ref
        node = schema
        for key in ref[2:].split("/"):
            node = node[key]
    return dict(node)


def fields_against_schema(kind: Any, node: dict[str, Any]) -> dict[str, list[str]]:
    """What a record type and its schema node disagree on: fields only one of them names, and
    fields the schema requires that the type lacks."""
    named = set(kind.__required_keys__) | set(kind.__optional_keys__)
    described = set(node.get("properties", {}))
    required = set(node.get("required", []))
    found = {
        "only in the type": sorted(named - described),
        "only in the schema": sorted(described - named),
        "required but not in the type": sorted(required - named),
    }
    return {k: v for k, v in found.items() if v}


@pytest.mark.parametrize(
    ("kind", "schema", "path"), _RECORD_TYPES, ids=[k.__name__ for k, _, _ in _RECORD_TYPES]
)
def test_each_record_type_names_the_fields_its_schema_describes(
    kind: Any, schema: str, path: tuple[str | int, ...]
) -> None:
    assert fields_against_schema(kind, _node(_schema(schema), path)) == {}


def test_the_field_check_catches_a_field_added_on_one_side_only() -> None:
    node = _node(_schema("result"), ("properties", "memory"))
    node["properties"] = {**node["properties"], "reserved_bytes": {"type": "integer"}}
    assert fields_against_schema(records.MemoryRecord, node) == {
        "only in the schema": ["reserved_bytes"]
    }
    node = _node(_schema("result"), ("properties", "fallback"))
    node["required"] = ["enabled", "ops"]
    assert fields_against_schema(records.FallbackRecord, node) == {
        "required but not in the type": ["ops"]
    }
    del node["properties"]["messages"]
    assert fields_against_schema(records.FallbackRecord, node)["only in the type"] == ["messages"]
