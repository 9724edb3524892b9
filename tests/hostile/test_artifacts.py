"""Hostile job artifacts against `aggregate --plan`: results a job's candidate side wrote
somewhere in its own artifact, to speak for another job (one that died) or to be judged twice.
A job's results are only its artifact's root; everything else is named and holds at defer."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from tests.helpers import cli
from tests.synthetic import Cell, make_run

GOOD = [Cell(workload="sdpa", case="a")]
PLAN = {"cpu-1": ["sdpa.a@cpu"], "cuda-1": ["sdpa.a@cuda"]}


def _job(folder: Path, seed: int, backend: str = "cpu", job: str | None = "") -> None:
    """A job's results in folder, recording the job the folder's name says (or job)."""
    cells = [Cell(workload="sdpa", case="a", backend=backend)]
    name = folder.name.rpartition("~")[2] if job == "" else job
    ids = (f"20261201T10000{seed}Z-0000b{seed}", f"20261201T11000{seed}Z-0000c{seed}")
    make_run(folder / "baseline", cells, run_id=ids[0], seed=seed, job=name)
    make_run(folder / "candidate", cells, run_id=ids[1], seed=seed, job=name)


def _aggregate(tmp_path: Path, plan: dict[str, list[str]]) -> tuple[int, dict, str]:  # type: ignore[type-arg]
    include = [
        {"job": n, "backend": n.split("-")[0], "runs-on": ["x"], "cells": " ".join(c)}
        for n, c in plan.items()
    ]
    (tmp_path / "plan.json").write_text(json.dumps({"include": include}))
    out = tmp_path / "decision"
    code, _, stderr = cli(
        "aggregate", str(tmp_path / "jobs"), "--out", str(out), "--plan",
        str(tmp_path / "plan.json"), "--jobs-result", "failure",
    )  # fmt: skip
    doc = json.loads((out / "decision.json").read_text()) if code != 2 else {}
    return code, doc, stderr


NESTINGS = {
    "a job folder inside the candidate side": "torch-matrix-job~pr~cpu-1/candidate/x/torch-matrix-job~pr~cuda-1",
    "a job folder beside the sides": "torch-matrix-job~pr~cpu-1/torch-matrix-job~pr~cuda-1",
    "two folders down in the download": "extra/deeper/torch-matrix-job~pr~cuda-1",
}


@pytest.mark.parametrize("nesting", sorted(NESTINGS))
def test_results_nested_in_an_artifact_never_speak_for_another_job(
    tmp_path: Path, nesting: str
) -> None:
    """Job cuda-1 died; job cpu-1's artifact holds results named for it. Before, aggregate took
    them as cuda-1's. Now cuda-1 did not report, the nested folder is named, and the decision
    is defer."""
    jobs = tmp_path / "jobs"
    _job(jobs / "torch-matrix-job~pr~cpu-1", 1)
    _job(jobs / NESTINGS[nesting], 2, backend="cuda")
    _code, doc, _stderr = _aggregate(tmp_path, PLAN)
    assert doc["decision"] == "defer", doc["reasons"]
    said = "\n".join(doc["reasons"])
    assert "job cuda-1 did not report" in said, said
    assert "results outside a job's artifact root" in said
    assert "torch-matrix-job~pr~cuda-1/baseline/run.json" in said
    (cuda,) = [c for c in doc["cells"] if c["cell_id"] == "sdpa.a@cuda"]
    assert cuda["gates"][0]["verdict"] == "untested"


@pytest.mark.parametrize("recorded", ["cuda-1", None], ids=["another-job", "no-job"])
def test_results_that_record_another_job_are_not_that_artifacts(
    tmp_path: Path, recorded: str | None
) -> None:
    """Job cpu-1's artifact holds, at its root, results that record job cuda-1 (copied whole
    from another artifact) or no job at all: not judged, cpu-1 did not report, and the line
    names what they record."""
    jobs = tmp_path / "jobs"
    _job(jobs / "torch-matrix-job~pr~cpu-1", 1, job=recorded)
    _job(jobs / "torch-matrix-job~pr~cuda-1", 2, backend="cuda")
    _code, doc, _stderr = _aggregate(tmp_path, PLAN)
    assert doc["decision"] == "defer", doc["reasons"]
    said = "\n".join(doc["reasons"])
    shown = recorded or "no job"
    assert (
        f"the results in job cpu-1's artifact record baseline {shown} and candidate {shown}" in said
    ), said
    assert "job cpu-1 did not report" in said, said
    (cpu,) = [c for c in doc["cells"] if c["cell_id"] == "sdpa.a@cpu"]
    assert cpu["gates"][0]["verdict"] == "untested"
    (cuda,) = [c for c in doc["cells"] if c["cell_id"] == "sdpa.a@cuda"]
    assert cuda["gates"][0]["verdict"] != "untested"


def test_a_stray_result_file_alone_holds_the_decision(tmp_path: Path) -> None:
    """Every planned job reported, but a decision.json sits where no job writes one."""
    jobs = tmp_path / "jobs"
    _job(jobs / "torch-matrix-job~pr~cpu-1", 1)
    _job(jobs / "torch-matrix-job~pr~cuda-1", 2, backend="cuda")
    _, doc, _ = _aggregate(tmp_path, PLAN)
    assert doc["decision"] == "adopt", doc["reasons"]
    (jobs / "torch-matrix-job~pr~cpu-1" / "candidate" / "cells" / "decision.json").write_text("{}")
    _code, doc, _ = _aggregate(tmp_path, PLAN)
    assert doc["decision"] == "defer"
    assert "torch-matrix-job~pr~cpu-1/candidate/cells/decision.json" in doc["reasons"][0]


@pytest.mark.parametrize("link", ["the job folder", "a side folder", "a run.json"])
def test_a_link_is_never_followed(tmp_path: Path, link: str) -> None:
    """A link in an artifact (to another job's results, or anywhere on the runner) is a stray:
    not followed, named, and the job it would have made does not report."""
    jobs = tmp_path / "jobs"
    elsewhere = tmp_path / "elsewhere"
    _job(elsewhere, 2, backend="cuda")
    _job(jobs / "torch-matrix-job~pr~cpu-1", 1)
    cuda = jobs / "torch-matrix-job~pr~cuda-1"
    if link == "the job folder":
        os.symlink(elsewhere, cuda)
    elif link == "a side folder":
        cuda.mkdir()
        shutil.copytree(elsewhere / "baseline", cuda / "baseline")
        os.symlink(elsewhere / "candidate", cuda / "candidate")
    else:
        shutil.copytree(elsewhere, cuda)
        (cuda / "candidate" / "run.json").unlink()
        os.symlink(elsewhere / "candidate" / "run.json", cuda / "candidate" / "run.json")
    _code, doc, _ = _aggregate(tmp_path, PLAN)
    assert doc["decision"] == "defer"
    said = "\n".join(doc["reasons"])
    assert "job cuda-1 did not report" in said and "(a link)" in said, said
