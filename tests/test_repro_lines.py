"""The reproduce lines of a decision, on synthetic image runs: which line a failure gets (docker run
for one side's failure, ab for a paired timing regression), that they name images by digest and
paths by the folder they are pasted in, and what bash makes of them."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from suite.core.loaded import LoadedRun
from suite.core.results import read_run, write_run
from suite.execute import shell
from suite.flows.compare import decide
from suite.judge.policy import load_policy
from suite.report.markdown import render_markdown
from tests.synthetic import Cell, make_run

PUSHED = "ghcr.io/team/torch-matrix/cpu@sha256:" + "a" * 64
LOCAL_ID = "sha256:" + "b" * 64
RECIPE = {
    "backend": "cpu", "dockerfile": "images/cpu/Dockerfile", "torch": "2.14.1",
    "from_base": False, "base": "python@sha256:" + "c" * 64, "index_url": None,
    "extra_index_urls": [], "companions": [], "wheel_dir": None, "credentials": False,
}  # fmt: skip


def _image(pushed: bool) -> dict[str, Any]:
    if pushed:
        return {"reference": PUSHED, "digest": PUSHED, "digest_kind": "repo-digest", "id": "x"}
    return {
        "reference": f"torch-matrix/cpu@{LOCAL_ID}", "digest": LOCAL_ID, "digest_kind": "image-id",
        "id": LOCAL_ID, "tag": "torch-matrix/cpu:torch-2.14.1-0123456789ab",
        "base": RECIPE["base"], "revision": "c0ffee", "source": "https://github.com/o/torch-matrix",
        "recipe": RECIPE,
    }  # fmt: skip


def _job(tmp_path: Path, candidate: Cell, scales: list[float] | None = None) -> Path:
    """A CI job's results folder (baseline/ beside candidate/) whose sides ran in images: the
    baseline's pushed to a registry, the candidate's built on the runner."""
    job = tmp_path / "runner work" / "torch-matrix-job-cpu-1"  # a space: quoting is exercised
    base = Cell(workload="w", case="a")
    make_run(job / "baseline", [base], run_id="20261130T100000Z-aaaaaa", rounds=20)
    make_run(
        job / "candidate", [candidate], run_id="20261130T100000Z-bbbbbb", rounds=20, scales=scales
    )
    for role, pushed in (("baseline", True), ("candidate", False)):
        run = read_run(job / role / "run.json")
        run["image"] = _image(pushed)
        run["environment"] = {**run["environment"], "image": {"reference": "r", "digest": "d"}}
        run["ab"] = {"spec": f"docker:{_image(pushed)['reference']}"}
        write_run(job / role / "run.json", run)
    return job


def _decide(job: Path) -> dict[str, Any]:
    base, cand = LoadedRun.load(job / "baseline"), LoadedRun.load(job / "candidate")
    return decide(base, cand, load_policy(None, None))


def _words(line: str, cwd: Path, env: dict[str, str] | None = None) -> list[str]:
    """What bash, pasted into cwd, passes to the line's first command (it is not run)."""
    first, _, rest = line.partition(" ")
    script = f"words() {{ printf '%s\\n' \"$@\"; }}; words {rest}"
    assert first in ("torch-matrix", "mkdir"), line
    out = subprocess.run(
        ["bash", "-c", script], cwd=cwd, capture_output=True, text=True, check=True,
        env={"PATH": "/usr/bin:/bin", **(env or {})},
    ).stdout  # fmt: skip
    return out.splitlines()


def _after(words: list[str], flag: str) -> str:
    return words[words.index(flag) + 1]


def test_a_timing_regression_gets_the_ab_line_of_both_images_by_digest(tmp_path: Path) -> None:
    job = _job(tmp_path, Cell(workload="w", case="a"), scales=[2.0] * 20)  # twice as slow
    decision = _decide(job)
    (cell,) = decision["cells"]
    assert {"latency_p50": "fail"}.items() <= {
        g["gate"]: g["verdict"] for g in cell["gates"]
    }.items()
    repro = cell["repro"]
    assert repro["docker"] is None  # one side alone shows no regression
    line = repro["ab"]
    assert str(tmp_path) not in line and "runner work" not in line
    pasted = tmp_path / "downloaded" / "job folder"
    pasted.mkdir(parents=True)
    words = _words(line, pasted)
    assert _after(words, "--baseline") == f"docker:{PUSHED}"
    assert _after(words, "--candidate") == f"docker:{LOCAL_ID}"  # the id: this machine's image
    assert _after(words, "--cell") == "w.a@cpu"
    out = _after(words, "--out")
    assert out.startswith(f"{pasted}/repro-ab/w.a@cpu/20") and out.endswith("Z")
    # After the rebuild line, the candidate is the image it built.
    rebuilt = _words(line, pasted, {"TORCH_MATRIX_CANDIDATE_IMAGE": "sha256:" + "d" * 64})
    assert _after(rebuilt, "--candidate") == "docker:sha256:" + "d" * 64
    # Only the image no registry holds needs building again, from the suite's commit.
    assert set(repro["build"]) == {"candidate"}
    build = repro["build"]["candidate"]
    assert 'export TORCH_MATRIX_CANDIDATE_IMAGE="$(DOCKER_BUILDKIT=1 docker build -q' in build
    assert "'https://github.com/o/torch-matrix.git#c0ffee'" in build
    assert subprocess.run(["bash", "-n", "-c", build], check=False).returncode == 0
    # The comment shows both, and says where to paste them.
    body = render_markdown(decision)
    assert line in body and build.splitlines()[-1] in body
    assert "in the results folder `torch-matrix-job-cpu-1`" in body


def test_a_failing_candidate_gets_its_docker_run_line_in_the_results_folder(
    tmp_path: Path,
) -> None:
    failing = Cell(workload="w", case="a", status="failed", message="planted")
    decision = _decide(_job(tmp_path, failing))
    (cell,) = decision["cells"]
    repro = cell["repro"]
    assert "ab" not in repro  # a status failure shows on the candidate alone
    line = repro["docker"]
    mkdir, run = line.split(" && ", 1)
    pasted = tmp_path / "downloaded"
    pasted.mkdir()
    assert _words(mkdir, pasted) == ["-p", f"{pasted}/candidate/repro/w.a@cpu"]
    words = _words("torch-matrix " + run.removeprefix("docker run "), pasted)
    assert LOCAL_ID in words  # the recorded image, by id, where no rebuild set the variable
    assert words[words.index(LOCAL_ID) + 1 : words.index(LOCAL_ID) + 2] == ["run"]
    assert _after(words, "--out").startswith(f"{pasted}/candidate/repro/w.a@cpu/20")
    assert f"{pasted}/candidate/repro/w.a@cpu:{pasted}/candidate/repro/w.a@cpu" in words


def test_shell_join_quotes_literals_and_leaves_placeholders_to_the_shell(tmp_path: Path) -> None:
    root = tmp_path / "a b"
    word = str(shell.under(root / "c d" / "e", root))
    assert word == f"{shell.HERE}/c d/e"
    placeholder, expression = shell.variable("SOME_IMAGE", "sha256:" + "e" * 64)
    line = shell.join(
        ["mkdir", "-p", f"{word}/{shell.TIME}", f"docker:{placeholder}", "it's"],
        {placeholder: expression},
    )
    assert line.startswith('mkdir -p "$PWD"\'/c d/e/\'"$(date -u +%Y%m%dT%H%M%SZ)"')
    words = _words(line, tmp_path)
    assert words[0] == "-p" and words[1].startswith(f"{tmp_path}/c d/e/20")
    assert words[2:] == ["docker:sha256:" + "e" * 64, "it's"]
    assert json.dumps(shell.EXPANSIONS)  # every placeholder has its expression


def test_the_ab_line_gives_venv_sides_their_extra_requirements_again(tmp_path: Path) -> None:
    from suite.flows.repro import ab_line

    def run(spec: str, extra: list[str]) -> Any:
        return {
            "ab": {"spec": spec, "with_requirements": extra}, "profile": "smoke",
            "matrix": {"file": "<built-in default matrix>"}, "workloads": ["hf_model"],
        }  # fmt: skip

    sides = {
        "baseline": (tmp_path / "baseline", run("torch==2.13.0", ["transformers==5.25.0"])),
        "candidate": (tmp_path / "candidate", run("torch==2.14.1", ["transformers==5.25.0"])),
    }
    words = _words(ab_line(sides, "hf_model.llama.train.eager.b2h32@cpu", None), tmp_path)
    assert words.count("--with") == 1 and _after(words, "--with") == "transformers==5.25.0"
    # An image side holds what it was built with: ab refuses --with beside one.
    sides["candidate"] = (tmp_path / "candidate", {**sides["candidate"][1], "image": _image(True)})
    words = _words(ab_line(sides, "hf_model.llama.train.eager.b2h32@cpu", None), tmp_path)
    assert "--with" not in words
