"""The image builder without a Docker daemon: what `torch-matrix image build` asks docker for,
through a stand-in docker CLI (TORCH_MATRIX_DOCKER) that keeps a state file. The real builds run
in tests/test_docker.py, tests/test_index_urls.py and the end-to-end test of the workflow."""

from __future__ import annotations

import json
import shutil
import stat
import sys
from pathlib import Path
from typing import Any

import pytest

from suite.core.errors import EnvironmentProblem, InputError
from suite.core.validation import validate
from suite.execute.image_build import BuildOptions, build_image
from suite.execute.images import Recipe, image_tag, rebuild_line, suite_digest
from suite.execute.indexes import Indexes
from tests.helpers import REPO, cli

TOKEN = "tok-0f1e2d3c4b5a"
REGISTRY = "registry.example.com/team/torch-matrix"

FAKE = r'''#!PYTHON
"""A docker CLI stand-in: image inspect, pull, build, push and run, with state in STATE."""
import hashlib, json, sys
from pathlib import Path

state_file = Path("STATE")
state = json.loads(state_file.read_text()) if state_file.exists() else {
    "images": {}, "builds": [], "secrets": [], "pushes": [], "runs": [], "pulls": []}
args = sys.argv[1:]


def digest(text):
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def save():
    state_file.write_text(json.dumps(state))


if args[:2] == ["image", "inspect"]:
    found = state["images"].get(args[2])
    if found is None:
        sys.stderr.write(f"Error: No such image: {args[2]}\n")
        sys.exit(1)
    print(json.dumps([found]))
elif args[0] == "pull":
    repo = args[1].split(":")[0]
    state["pulls"].append(args[1])
    state["images"][args[1]] = {"Id": digest("base" + args[1]),
                                "RepoDigests": [f"{repo}@{digest('repo' + args[1])}"],
                                "RootFS": {"Layers": [digest("l0")]}}
elif args[0] == "build":
    state["builds"].append(args)
    for i, word in enumerate(args):
        if word == "--secret" and args[i + 1].startswith("id=pip-index,"):
            state["secrets"].append(Path(args[i + 1].split("src=", 1)[1]).read_text())
    iid = args[args.index("--iidfile") + 1]
    tag = args[args.index("-t") + 1]
    image_id = digest(" ".join(a for a in args if "/tmp" not in a))
    Path(iid).write_text(image_id)
    first = digest("other-base" if "MOVED_BASE" in state else "l0")  # a tag moved mid-build
    state["images"][tag] = state["images"][image_id] = {
        "Id": image_id, "RepoDigests": [], "RootFS": {"Layers": [first, digest(tag)]}}
    print("#1 DONE")
elif args[0] == "push":
    state["pushes"].append(args[1])
    repo = args[1].rsplit(":", 1)[0]
    state["images"][args[1]]["RepoDigests"] = [f"{repo}@{digest('pushed' + args[1])}"]
elif args[0] == "run":
    state["runs"].append(args)
    print(json.dumps({"checks": {"compile": {"ok": True, "detail": "stand-in"},
                                 "aoti": {"ok": "FAIL_AOTI" not in state, "detail": "stand-in"}}}))
else:
    sys.stderr.write(f"stand-in docker: unexpected {args}\n")
    sys.exit(2)
save()
'''


def _fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    state = tmp_path / "docker-state.json"
    script = tmp_path / "docker"
    script.write_text(FAKE.replace("PYTHON", sys.executable).replace("STATE", str(state)))
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("TORCH_MATRIX_DOCKER", str(script))
    monkeypatch.setenv("TORCH_MATRIX_CACHE", str(tmp_path / "cache"))
    return state


def _state(path: Path) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(path.read_text())
    return loaded


def _recipe() -> Recipe:
    return Recipe(
        "cpu",
        "2.14.1",
        base="python:3.11-slim",
        indexes=Indexes("https://reader:${INDEX_TOKEN}@pypi.example.com/simple"),
        companions=("torchvision==0.29.1",),
    )


def test_a_pushed_image_is_named_by_its_registry_digest_and_keeps_no_credential(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    state_file = _fake(tmp_path, monkeypatch)
    monkeypatch.setenv("INDEX_TOKEN", TOKEN)
    log = tmp_path / "build.log"
    built = build_image(_recipe(), BuildOptions(context=REPO, log=log, registry=REGISTRY))
    state = _state(state_file)
    (argv,) = state["builds"]
    # The base was pulled and pinned by its digest; the index keys the layer without the token.
    assert state["pulls"] == ["python:3.11-slim"]
    assert "BASE_IMAGE=python@sha256:" in " ".join(argv)
    assert "TORCH_INDEX_URL=https://pypi.example.com/simple" in argv
    assert "TORCH_COMPANIONS=torchvision==0.29.1" in argv
    assert f"SUITE_DIGEST={suite_digest()}" in argv
    # The credential went to the build as the pip-index secret, and the file is gone.
    (secret,) = state["secrets"]
    assert f"reader:{TOKEN}@pypi.example.com" in secret
    secret_src = next(a for a in argv if a.startswith("id=pip-index,src="))
    assert not Path(secret_src.split("src=", 1)[1]).exists()
    # Pushed, then run by the registry's digest.
    assert state["pushes"] == [built.tag] and built.tag.startswith(f"{REGISTRY}/cpu:torch-2.14.1-")
    assert built.repo_digest is not None and built.repo_digest.startswith(f"{REGISTRY}/cpu@sha256:")
    assert built.side == f"docker:{built.repo_digest}"
    record = built.record()
    validate(record, "torch-matrix/image", file="<record>")
    assert record["recipe"]["credentials"] is True
    for text in (json.dumps(argv), json.dumps(record), log.read_text(), built.side):
        assert TOKEN not in text
    # The smoke test ran in the image, once: a second build of the same layers skips it.
    assert len(state["runs"]) == 1 and state["runs"][0][-2:] == ["-m", "suite.worker.smoke"]
    again = build_image(_recipe(), BuildOptions(context=REPO, log=log, registry=REGISTRY))
    assert len(_state(state_file)["runs"]) == 1 and again.smoke and again.smoke["cached"]


def test_an_image_that_cannot_compile_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    state_file = _fake(tmp_path, monkeypatch)
    state_file.write_text(json.dumps(
        {"images": {}, "builds": [], "secrets": [], "pushes": [], "runs": [], "pulls": [],
         "FAIL_AOTI": True}
    ))  # fmt: skip
    monkeypatch.setenv("INDEX_TOKEN", TOKEN)
    with pytest.raises(EnvironmentProblem, match=r"cannot run every cell the matrix asks.*aoti"):
        build_image(_recipe(), BuildOptions(context=REPO, log=tmp_path / "log"))


def test_an_image_not_built_on_the_checked_base_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The base was checked by digest, but its tag moved before the build's FROM read it: the
    built image's layers do not begin with the base's, and the build fails naming both."""
    state_file = _fake(tmp_path, monkeypatch)
    state_file.write_text(json.dumps(
        {"images": {}, "builds": [], "secrets": [], "pushes": [], "runs": [], "pulls": [],
         "MOVED_BASE": True}
    ))  # fmt: skip
    monkeypatch.setenv("INDEX_TOKEN", TOKEN)
    with pytest.raises(EnvironmentProblem, match=r"is not built on the base python@sha256:"):
        build_image(_recipe(), BuildOptions(context=REPO, log=tmp_path / "log"))
    assert _state(state_file)["runs"] == []  # never smoke-tested, never pushed


def test_a_context_holding_another_suite_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fake(tmp_path, monkeypatch)
    other = tmp_path / "checkout"
    for name in ("suite", "schemas", "images"):
        shutil.copytree(REPO / name, other / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", other)
    assert suite_digest(other / "suite") == suite_digest()  # a copy is the same suite
    (other / "suite" / "core" / "stats.py").write_text("# another suite\n", encoding="utf-8")
    with pytest.raises(InputError, match="holds another suite"):
        build_image(Recipe("cpu", "2.14.1"), BuildOptions(context=other, log=tmp_path / "log"))


def test_the_tag_and_the_rebuild_line_name_the_recipe() -> None:
    recipe = Recipe("cuda", "2.14.1+cu128", indexes=Indexes("https://u:p@h.example/whl/cu128"))
    assert image_tag(recipe, "ab" * 32) == "torch-matrix/cuda:torch-2.14.1-cu128-abababababab"
    public = recipe.public()
    assert public["index_url"] == "https://h.example/whl/cu128" and public["credentials"]
    line = rebuild_line(
        public, "python@sha256:" + "1" * 64, "c0ffee", "https://github.com/o/r", "t"
    )
    assert line.startswith("DOCKER_BUILDKIT=1 docker build -f images/cuda/Dockerfile")
    assert "--build-arg TORCH_INDEX_URL=https://h.example/whl/cu128" in line
    assert "--secret id=pip-index,src=PIP_INDEX_FILE" in line and ":p@" not in line
    assert " 'https://github.com/o/r.git#c0ffee'" in line  # builds from the commit, anywhere


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--backend", "mps", "--torch", "2.14.1"], "'mps' is not one of"),
        (["--backend", "cpu", "--torch", "latest"], "exact version"),
        (["--backend", "cpu", "--torch", "2.14.1", "--torch-from-base"], "needs --base"),
        (
            ["--backend", "cpu", "--torch", "2.14.1", "--index-url", "https://u:${NOPE_VAR}@h/s"],
            "NOPE_VAR, which the environment does not set",
        ),
    ],
)
def test_bad_build_input_is_refused_before_docker_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: list[str], message: str
) -> None:
    state_file = _fake(tmp_path, monkeypatch)
    monkeypatch.delenv("NOPE_VAR", raising=False)
    code, _, stderr = cli("image", "build", *args, "--log", str(tmp_path / "log"))
    assert code == 2 and message in stderr, stderr
    assert not state_file.exists()  # docker was never asked anything


def test_an_existing_record_is_never_overwritten(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fake(tmp_path, monkeypatch)
    record = tmp_path / "image.json"
    record.write_text("mine")
    code, _, stderr = cli(
        "image", "build", "--backend", "cpu", "--torch", "2.14.1", "--record", str(record)
    )
    assert code == 2 and "already exists" in stderr
    assert record.read_text() == "mine"
