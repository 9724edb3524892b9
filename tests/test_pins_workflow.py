"""The torch pins of GitHub Actions workflows and composite actions (suite/pins/workflow_file.py):
`pip install` in run steps with the env and matrix values the file gives, a job's container
image, each job (and each matrix value of a torch requirement) an environment of its own. The
workflows are small ones written here."""

from __future__ import annotations

import pytest

from suite.pins.assess import Assessment, assess, read_tree, tree_of
from suite.pins.files import _requirement_word, pin_file_kind, pins_in_file
from suite.pins.formats import Found, Unreadable
from suite.pins.requirement import Pin
from suite.pins.scan import Changed, texts_changes, unexplained
from suite.pins.workflow_file import read_workflow

CI = ".github/workflows/ci.yml"

RUN = """\
name: ci
on: [push]
jobs:
  test:
    runs-on: ubuntu-latest
    steps:
      - uses: actions/checkout@v4
      - run: |
          python -m pip install -U pip
          pip install torch=={v} numpy
      - run: pytest -q
"""


def _assess(base: dict[str, str], head: dict[str, str]) -> Assessment:
    return assess(tree_of(base), tree_of(head), texts_changes(base, head))


def _read(text: str) -> list[Found]:
    return read_workflow(text, _requirement_word)


def test_workflow_files_and_composite_actions_are_read_as_workflows() -> None:
    for path in (CI, ".github/workflows/nightly.yaml", ".GitHub/Workflows/GPU.YML",
                 ".github/actions/setup/action.yml", ".github/action.yaml"):  # fmt: skip
        assert pin_file_kind(path) == "workflow", path
    assert pin_file_kind("environment.yml") == "conda"
    assert pin_file_kind("ci/environment.yaml") == "conda"
    assert pin_file_kind(".github/environment.yml") == "conda"
    for path in ("action.yml", ".github/workflows/sub/x.yml", "docs/.github/workflows/ci.yml"):
        assert pin_file_kind(path) is None, path


def test_a_run_step_pin_moved_is_changed() -> None:
    result = _assess({CI: RUN.format(v="2.3.1")}, {CI: RUN.format(v="2.5.1")})
    assert result.status == "changed", result.message
    assert (result.baseline, result.candidate) == ("torch==2.3.1", "torch==2.5.1")
    assert result.files == (CI,)
    assert result.candidate_pin is not None and result.candidate_pin.part == "test"


def test_a_workflow_that_installs_no_torch_and_changes_is_unchanged() -> None:
    base = RUN.format(v="2.3.1").replace("torch==2.3.1 ", "")
    head = base.replace("pytest -q", "pytest -x").replace("numpy", "numpy==2.1.0")
    result = _assess({CI: base}, {CI: head})
    assert result.status == "unchanged", result.message
    assert pins_in_file(CI, head) == []


def test_found_lines_are_the_lines_the_requirement_is_written_on() -> None:
    text = """\
jobs:
  a:
    container:
      image: pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime
    steps:
      - run: |
          echo start
          pip install numpy \\
            torch==2.5.1 \\
            torchvision==0.20.1
      - run: pip install torch==2.5.1
      - name: quoted
        run: "pip install 'torch==2.5.1'"
      - run: >
          pip install
          torchaudio==2.5.1
"""
    found = _read(text)
    assert [(f.package, f.line, f.kind) for f in found] == [
        ("torch", 4, "lock"),
        ("torch", 9, "manifest"),
        ("torchvision", 10, "manifest"),
        ("torch", 11, "manifest"),
        ("torch", 13, "manifest"),
        ("torchaudio", 16, "manifest"),
    ]
    assert {f.part for f in found} == {"a"}
    assert found[0].where == "container"


ENV = """\
env:
  TORCH_VERSION: "2.3.1"
  VISION: 0.18.1
jobs:
  test:
    env:
      VISION: 0.19.1
    steps:
      - run: pip install torch==${{ env.TORCH_VERSION }} torchvision==$VISION
      - run: pip install "torchvision==${VISION}+cpu" --index-url $INDEX
        env:
          VISION: 0.20.1
          INDEX: https://download.pytorch.org/whl/cpu
  cpu:
    steps:
      - run: pip install torch==${{ env.TORCH_VERSION }}+cpu
        env:
          TORCH_VERSION: "2.4.1"
"""


def test_env_values_are_substituted_step_over_job_over_workflow() -> None:
    found = _read(ENV)
    assert [(f.requirement, f.line, f.index_url, f.part) for f in found] == [
        ("torch==2.3.1", 9, None, "test"),
        ("torchvision==0.19.1", 9, None, "test"),
        ("torchvision==0.20.1+cpu", 10, "https://download.pytorch.org/whl/cpu", "test"),
        ("torch==2.4.1+cpu", 16, None, "cpu"),
    ]
    # The env line moved, the run line did not: read exactly, the env line explained.
    result = _assess({CI: ENV}, {CI: ENV.replace('"2.3.1"', '"2.5.1"')})
    assert result.status == "changed", result.message
    assert (result.baseline, result.candidate) == ("torch==2.3.1", "torch==2.5.1")


@pytest.mark.parametrize(
    "env",
    [
        "    env:\n      TORCH_VERSION: ${{ inputs.torch }}\n",  # a value that is an expression
        "    env:\n      OTHER: x\n",  # no value at all
        "    env: ${{ fromJSON(inputs.env) }}\n",  # the whole env an expression
    ],
)
def test_an_env_value_the_file_does_not_give_is_unreadable(env: str) -> None:
    text = "jobs:\n  t:\n" + env + "    steps:\n      - run: pip install torch==$TORCH_VERSION\n"
    with pytest.raises(Unreadable, match=r"line \d+: run: pip install .*: [$]TORCH_VERSION has"):
        _read(text)
    assert _read(text.replace("torch==", "numpy==")) == []


MATRIX = """\
jobs:
  test:
    strategy:
      matrix:
        python: ["3.10", "3.12"]
        torch-version: {torches}
        include:
          - torch-version: "2.5.1"
            python: "3.12"
    steps:
      - run: pip install "torch==${{{{ matrix.torch-version }}}}" numpy
"""


def test_a_matrix_key_in_a_torch_requirement_is_one_part_per_value() -> None:
    found = _read(MATRIX.format(torches='["2.2.2", "2.4.1"]'))
    assert [(f.requirement, f.part, f.line) for f in found] == [
        ("torch==2.2.2", "test[torch-version=2.2.2]", 11),
        ("torch==2.4.1", "test[torch-version=2.4.1]", 11),
        ("torch==2.5.1", "test[torch-version=2.5.1]", 11),
    ]
    # A quoted scalar is the text written; a plain number GitHub renders otherwise (2.10 is
    # the number 2.1) cannot be told.
    quoted = _read(MATRIX.format(torches='["2.10"]'))
    assert [f.requirement for f in quoted] == ["torch==2.10", "torch==2.5.1"]
    with pytest.raises(Unreadable, match=r"\$\{\{ matrix.torch-version \}\} has no value"):
        _read(MATRIX.format(torches="[2.10]"))
    with pytest.raises(Unreadable, match=r"line 11: .*matrix.torch-version"):
        _read(MATRIX.format(torches="${{ fromJSON(inputs.torches) }}"))


def test_a_matrix_that_moves_its_torch_values_is_unknown_naming_both_parts() -> None:
    base = MATRIX.format(torches='["2.2.2", "2.3.1"]')
    head = MATRIX.format(torches='["2.4.1", "2.3.1"]')
    result = _assess({CI: base}, {CI: head})
    assert result.status == "unknown", result.message
    assert "environments moved differently" in result.message
    assert f"{CI}#test[torch-version=2.2.2]: torch==2.2.2" in result.message
    assert f"{CI}#test[torch-version=2.4.1]: no torch -> torch==2.4.1" in result.message
    # A matrix change that leaves the torch values alone.
    same = _assess({CI: base}, {CI: base.replace('"3.10", "3.12"', '"3.11", "3.13"')})
    assert same.status == "unchanged", same.message


def test_the_scan_explains_a_changed_matrix_line_and_run_line() -> None:
    base = MATRIX.format(torches='["2.3.1"]')
    head = MATRIX.format(torches='["2.4.1", "2.3.1"]')
    base_pins, bad = read_tree(tree_of({CI: base}))
    head_pins, head_bad = read_tree(tree_of({CI: head}))
    assert not bad and not head_bad
    changes = texts_changes({CI: base}, {CI: head})
    assert {(c.side, c.line) for c in changes} == {("base", 6), ("head", 6)}
    lines = head.splitlines()
    alone = [Changed(CI, "head", 6, lines[5]), Changed(CI, "head", 11, lines[10])]
    pins = {"base": base_pins, "head": head_pins}
    read = {"base": {CI}, "head": {CI}}
    assert unexplained([*changes, *alone], pins, read) == []
    nothing = {"base": list[Pin](), "head": list[Pin]()}
    assert unexplained(changes, nothing, read) == changes  # without the reader: unexplained
    assert unexplained(alone, nothing, read) == alone
    result = _assess({CI: base}, {CI: head})  # one new environment: torch added there
    assert (result.status, result.candidate, result.unknown) == ("changed", "torch==2.4.1", ())


CONTAINER = """\
jobs:
  gpu:
    runs-on: [self-hosted, gpu]
    container: {image}
    steps:
      - run: python -c "import torch"
"""


def test_a_container_image_moved_is_changed() -> None:
    image = "pytorch/pytorch:{}-cuda12.4-cudnn9-runtime"
    base = CONTAINER.format(image=image.format("2.5.1"))
    head = CONTAINER.format(image=image.format("2.6.0"))
    result = _assess({CI: base}, {CI: head})
    assert result.status == "changed", result.message
    assert (result.baseline, result.candidate) == ("torch==2.5.1", "torch==2.6.0")
    assert result.candidate_pin is not None
    assert (result.candidate_pin.kind, result.candidate_pin.line) == ("lock", 4)
    mapping = CONTAINER.format(image="\n      image: " + image.format("2.6.0"))
    assert [(f.requirement, f.line, f.part) for f in _read(mapping)] == [("torch==2.6.0", 5, "gpu")]


@pytest.mark.parametrize(
    ("image", "why"),
    [
        ("nvcr.io/nvidia/pytorch:24.10-py3", "NGC release tag"),
        ("ghcr.io/team/pytorch-ci:latest", "does not say which torch"),
        ("pytorch/pytorch:${{ matrix.tag }}", "given by an expression"),
    ],
)
def test_a_container_whose_torch_cannot_be_told_is_unreadable(image: str, why: str) -> None:
    with pytest.raises(Unreadable, match=rf"line 4: container .*{why}"):
        _read(CONTAINER.format(image=image))


def test_a_container_without_torch_in_its_name_is_ignored() -> None:
    assert _read(CONTAINER.format(image="ghcr.io/team/ci:${{ inputs.tag }}")) == []
    assert _read(CONTAINER.format(image="python:3.12")) == []


INPUTS = """\
on:
  workflow_dispatch:
    inputs:
      torch:
        default: "2.5.1"
jobs:
  test:
    steps:
      - run: pip install {words}
"""


def test_an_input_in_a_changed_torch_requirement_is_unknown_naming_the_file() -> None:
    base = INPUTS.format(words="torch==2.3.1")
    head = INPUTS.format(words="torch==${{ inputs.torch }}")
    result = _assess({CI: base}, {CI: head})
    assert result.status == "unknown", result.message
    [why] = result.unknown
    assert (why.file, why.side) == (CI, "head")
    assert why.reason == (
        "line 9: run: pip install torch==${{ inputs.torch }}: ${{ inputs.torch }} has no value "
        "this file gives, so what it installs cannot be told"
    )
    # A word that names no tracked package is skipped, whatever it holds.
    assert _read(INPUTS.format(words="${{ inputs.extra }} numpy==$NUMPY")) == []
    with pytest.raises(Unreadable, match=r"inputs\.torch-spec"):
        _read(INPUTS.format(words="${{ inputs.torch-spec }}"))


ACTION = """\
name: setup
description: installs the stack
inputs:
  cuda:
    default: cu124
runs:
  using: composite
  steps:
    - uses: actions/setup-python@v5
    - shell: bash
      run: |
        pip install torch=={v} --index-url https://download.pytorch.org/whl/${{{{ inputs.cuda }}}}
    - shell: python
      run: print("pip install torch==9.9.9")
"""


def test_a_composite_action_under_github_is_read() -> None:
    path = ".github/actions/x/action.yml"
    found = _read(ACTION.format(v="2.3.1"))
    assert [(f.requirement, f.part, f.line) for f in found] == [("torch==2.3.1", "action", 12)]
    assert found[0].index_url == "https://download.pytorch.org/whl/${{ inputs.cuda }}"
    result = _assess({path: ACTION.format(v="2.3.1")}, {path: ACTION.format(v="2.5.1")})
    assert result.status == "changed", result.message
    assert (result.baseline, result.candidate) == ("torch==2.3.1", "torch==2.5.1")


def test_a_workflow_whose_yaml_does_not_parse_is_unknown() -> None:
    broken = RUN.format(v="2.5.1").replace("    steps:", "   steps: [")
    result = _assess({CI: RUN.format(v="2.3.1")}, {CI: broken})
    assert result.status == "unknown", result.message
    assert any(u.file == CI and "not valid YAML" in u.reason for u in result.unknown)
    with pytest.raises(Unreadable, match="not a mapping"):
        _read("- run: pip install torch==2.5.1\n")
    with pytest.raises(Unreadable, match="repeats"):
        _read("jobs:\n  a: {}\n  a: {}\n")


def test_jobs_are_parts_and_yaml_merges_are_read() -> None:
    text = """\
x-env: &env
  TORCH: "2.4.1"
jobs:
  cpu:
    env:
      <<: *env
    steps:
      - run: pip install torch==$TORCH
  cuda:
    steps:
      - run: pip install torch==2.5.1
"""
    found = _read(text)
    assert [(f.requirement, f.part) for f in found] == [
        ("torch==2.4.1", "cpu"),
        ("torch==2.5.1", "cuda"),
    ]
