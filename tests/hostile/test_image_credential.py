"""The images' pip steps (class 5 in an image): the index credential, mounted as the pip-index
secret, reaches pip's own environment only. In the image's steps it is sourced inside
`with_index` alone, so the python that checks the torch install and lists its version never
holds it; the suite's step runs the pip copied before torch was installed, started by
suite/execute/pip_boot.py, so nothing the torch step installed (a .pth line, sitecustomize,
files over pip's own) runs beside it; and the suite's build code runs in a stage of its own,
where no package a pull request named is installed. Read from the shipped Dockerfiles, each
RUN as the shell sees it (continuation lines joined)."""

from __future__ import annotations

import re

import pytest

from tests.helpers import REPO

SOURCED = ". /run/secrets/pip-index"
WITH_INDEX = "with_index() ( if [ -s /run/secrets/pip-index ]; then set -a; " + SOURCED


def _stages(backend: str) -> list[tuple[str, list[str]]]:
    """Each stage's FROM line and its RUN instructions, continuation lines joined."""
    text = (REPO / "images" / backend / "Dockerfile").read_text()
    joined = re.sub(r"\\\n", " ", text)
    stages: list[tuple[str, list[str]]] = []
    for line in joined.splitlines():
        if line.startswith("FROM "):
            stages.append((line, []))
        elif line.startswith("RUN ") and stages:
            stages[-1][1].append(line)
    return stages


@pytest.mark.parametrize("backend", ["cpu", "cuda", "rocm"])
def test_the_credential_reaches_pip_alone(backend: str) -> None:
    stages = _stages(backend)
    runtime = [
        runs
        for head, runs in stages
        if head.startswith("FROM ${BASE_IMAGE}") and " AS " not in head
    ]
    (runs,) = runtime
    credentialed = [run for run in runs if "id=pip-index" in run]
    assert len(credentialed) == 2, credentialed  # the torch step and the suite's step
    for run in credentialed:
        # sourced once, inside with_index's subshell, and nowhere else
        assert run.count(SOURCED) == 1 and WITH_INDEX in run, run
        for command in re.split(r";\s*", run):
            if re.search(r"\bpip install\b|guarded_pip\b", command) and "--no-index" not in command:
                uses = "with_index" in command or command.lstrip().startswith("guarded_pip()")
                assert uses, (
                    f"{backend}: a pip call that may reach the index without with_index: {command}"
                )
    torch_step, suite_step = credentialed
    assert "python -c 'import torch" in torch_step  # the check runs, outside with_index
    assert "/src/suite/execute/pip_boot.py /opt/torch-matrix-pip install" in suite_step
    assert "/suite" in suite_step and '"/src' not in suite_step  # a wheel, never a build of /src
    # the pip the suite's step runs was copied before the torch step ran
    (first,) = [run for run in runs if "python3 -m venv" in run]
    assert runs.index(first) < runs.index(torch_step)
    assert "/opt/torch-matrix-pip/" in first


@pytest.mark.parametrize("backend", ["cpu", "cuda", "rocm"])
def test_the_suite_is_built_in_a_stage_of_its_own(backend: str) -> None:
    (suite,) = [runs for head, runs in _stages(backend) if head.endswith(" AS suite")]
    (build,) = suite
    assert "pip wheel" in build and "torch" not in build.replace("torch-matrix", "")
