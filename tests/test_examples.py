"""The README's plugin example runs as written, and the README shows the file as it is."""

from __future__ import annotations

from pathlib import Path

from suite.core.results import read_result
from tests.helpers import REPO, cli

EXAMPLE = REPO / "examples" / "sink_mask.py"


def test_readme_shows_the_example_file() -> None:
    readme = (REPO / "README.md").read_text()
    code = EXAMPLE.read_text()
    body = code[code.index("from __future__") :]
    assert body.strip() in readme


def test_sink_mask_example_runs(tmp_path: Path) -> None:
    out = tmp_path / "run"
    code, _, err = cli(
        "run", "--workload", f"{EXAMPLE}:SinkMask", "--backend", "cpu", "--out", str(out)
    )
    assert code == 0, err
    doc = read_result(out / "cells" / "sink_mask.4.eager.fp32.s256@cpu.json")
    assert doc["status"] == "ok"
    assert doc["correctness"]["passed"]
    assert doc["correctness"]["reference"] == "sdpa with dense sink mask"
