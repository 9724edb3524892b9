"""The decision artifact the comment job reads (class 4's sibling): a same-repository pull
request can edit the caller workflow that uploads it, so `comment --decision` reads it through
the room (suite/untrusted/decision.py). A link, a file past the cap, a repeated key or a record
the schema refuses is an input error naming the file (exit 2), before any token is read or any
request made; the real decision is read as before."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from suite.core.errors import InputError
from suite.core.validation import MAX_DOCUMENT_BYTES
from suite.untrusted.decision import read_decision
from tests.helpers import TESTS, cli

REAL = TESTS / "fixtures" / "decisions" / "pr-check.json"
ARGS = ["--repo", "o/r", "--pr", "7", "--token-env", "TORCH_MATRIX_TEST_NO_TOKEN"]


def _hostile(tmp_path: Path, kind: str) -> Path:
    path = tmp_path / "decision.json"
    if kind == "link":
        secret = tmp_path / "elsewhere.json"
        secret.write_text(REAL.read_text())
        path.symlink_to(secret)
    elif kind == "folder":
        path.mkdir()
    elif kind == "huge":
        path.write_text(REAL.read_text()[:-2] + ',"x":"' + "a" * MAX_DOCUMENT_BYTES + '"}')
    elif kind == "repeated":
        path.write_text('{"kind": "torch-matrix/decision", "kind": "torch-matrix/decision"}')
    elif kind == "schema":
        doc = json.loads(REAL.read_text())
        doc["decision"] = "adopt\n::error::owned"
        path.write_text(json.dumps(doc))
    return path


@pytest.mark.parametrize("kind", ["link", "folder", "huge", "repeated", "schema"])
def test_a_hostile_decision_artifact_is_an_input_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    monkeypatch.setenv("GITHUB_API_URL", "http://127.0.0.1:9")  # nothing listens: no request
    path = _hostile(tmp_path, kind)
    with pytest.raises(InputError) as raised:
        read_decision(path)
    assert str(path) in str(raised.value)
    code, out, err = cli("comment", "--decision", str(path), *ARGS)
    assert code == 2, (out, err)
    assert str(path) in err and "comment " not in out


def test_the_real_decision_reads_as_it_is(tmp_path: Path) -> None:
    assert read_decision(REAL) == json.loads(REAL.read_text())
