"""The venv cache under two runs at once (two jobs on one runner, two A/Bs, two test workers):
the second waits for the first's build and reuses it, instead of removing the half-made venv as
an unfinished one and building its own over it."""

from __future__ import annotations

import subprocess
import threading
from pathlib import Path
from typing import Any

import pytest

from suite.execute import sides

# How long the first build waits to see whether a second one starts beside it. Only the unlocked
# defect can start one; a slow machine makes the wait end with nothing seen, never a failure.
SECOND_BUILD_PATIENCE_S = 2.0


def test_two_runs_wanting_one_venv_build_it_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TORCH_MATRIX_CACHE", str(tmp_path / "cache"))
    builds: list[str] = []
    second_build = threading.Event()

    def fake_run(argv: list[str], **_: Any) -> subprocess.CompletedProcess[str]:
        if argv[1:4] == ["-I", "-m", "venv"]:
            builds.append(argv[-1])
            if len(builds) == 1:  # the first build: does a second start while it runs?
                second_build.wait(SECOND_BUILD_PATIENCE_S)
            else:
                second_build.set()
            venv = Path(argv[-1])
            (venv / "bin").mkdir(parents=True, exist_ok=True)
            (venv / "bin" / "python").write_text("")
        return subprocess.CompletedProcess(argv, 0, "", "")

    monkeypatch.setattr(sides.subprocess, "run", fake_run)
    results: list[tuple[Path, float]] = []
    threads = [
        threading.Thread(target=lambda: results.append(sides.venv_for("torch==2.13.0")))
        for _ in range(2)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(builds) == 1, builds
    assert len(results) == 2 and results[0][0] == results[1][0]
    assert (results[0][0].parent.parent / ".torch-matrix-ready").is_file()
    assert sorted(seconds == 0.0 for _, seconds in results) == [False, True]  # one reused it
