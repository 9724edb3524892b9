"""The vocabulary of the records is defined once (suite/core/records.py): each Literal there
holds exactly the values its schema allows, so neither can drift from the other."""

from __future__ import annotations

import json
from typing import Any

import pytest

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
