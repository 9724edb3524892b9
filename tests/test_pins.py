"""Torch pin-bump detection: every pin format (fixtures in tests/fixtures/pins), failing closed,
git refs, the CLI."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from suite.cli.ci import pins_command, write_github_output
from suite.core.errors import InputError
from suite.pins.assess import (
    MAX_FILE_BYTES,
    detect_bump,
    effective_pin,
    files_at_ref,
    find_torch_pins,
    pin_file_kind,
    pins_in_file,
    tree_at_ref,
)
from suite.pins.formats import Unreadable

needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")

REQUIREMENTS = """\
# pinned for the fleet
--index-url https://download.pytorch.org/whl/cpu
--extra-index-url=https://pypi.org/simple
numpy==2.1.0  # torch==9.9.9 in a comment is no pin
torch==2.13.0+cpu ; sys_platform == "linux" \\
    --hash=sha256:0123456789abcdef
torchvision==0.28.0
"""


def test_requirements_pin_with_local_version_marker_hash_and_index() -> None:
    pin, vision = find_torch_pins({"requirements.txt": REQUIREMENTS})
    assert (vision.package, vision.side) == ("torchvision", "torchvision==0.28.0")
    assert (pin.file, pin.line) == ("requirements.txt", 5)
    assert pin.requirement == 'torch==2.13.0+cpu; sys_platform == "linux"'
    assert pin.specifier == "==2.13.0+cpu"
    assert pin.version == "2.13.0+cpu"
    assert pin.side == "torch==2.13.0+cpu"  # markers dropped: a side is one interpreter
    assert pin.index_url == "https://download.pytorch.org/whl/cpu"
    assert pin.extra_index_urls == ("https://pypi.org/simple",)


@pytest.mark.parametrize(
    ("line", "specifier", "version"),
    [
        ("torch==2.13.0", "==2.13.0", "2.13.0"),
        ("torch===2.13.0", "===2.13.0", "2.13.0"),
        ("torch>=2.1,<3", "<3,>=2.1", None),
        ("torch==2.13.*", "==2.13.*", None),
        ("Torch [opt-einsum] == 2.13.0", "==2.13.0", "2.13.0"),
    ],
)
def test_specifier_forms(line: str, specifier: str, version: str | None) -> None:
    [pin] = pins_in_file("requirements.in", f"-i https://example.invalid/simple\n{line}\n")
    assert (pin.specifier, pin.version, pin.line) == (specifier, version, 2)
    assert pin.index_url == "https://example.invalid/simple"


def test_bare_names_other_packages_and_prose_are_not_pins() -> None:
    text = "torch\ntorchvision\ntorchmetrics==1.6\n-r other.txt\n-e .\n./local/pkg\n"
    assert pins_in_file("requirements.txt", text) == []
    readme = "torch is installed from the CUDA index, see below.\n"
    assert pins_in_file("requirements/README.txt", readme) == []


def test_a_broken_torch_line_names_file_and_line() -> None:
    with pytest.raises(Unreadable, match="line 2"):
        pins_in_file("requirements.txt", "numpy\ntorch=2.13.0\n")
    with pytest.raises(InputError) as info:
        find_torch_pins({"requirements.txt": "numpy\ntorch=2.13.0\n"})
    assert info.value.file == "requirements.txt"


@pytest.mark.parametrize(
    ("path", "kind"),
    [
        ("requirements.txt", "requirements"),
        ("ci/requirements-cuda.txt", "requirements"),
        ("constraints.txt", "requirements"),
        ("requirements/base.txt", "requirements"),
        ("requirements.in", "requirements"),
        ("dev.in", "requirements"),
        ("sub/pyproject.toml", "pyproject"),
        ("MANIFEST.in", None),
        ("config.h.in", None),
        ("notes.txt", None),
        ("setup.cfg", "setup-cfg"),
        ("pkg/setup.py", "setup-py"),
        ("uv.lock", "uv-lock"),
        ("sub/poetry.lock", "poetry-lock"),
        ("pdm.lock", "pdm-lock"),
        ("Pipfile.lock", "pipfile-lock"),
        ("pylock.toml", "pylock"),
        ("pylock.gpu.toml", "pylock"),
        ("environment.yml", "conda"),
        ("envs/environment-cuda.yaml", "conda"),
        ("pixi.toml", "pixi-manifest"),
        ("pixi.lock", "pixi-lock"),
        ("Dockerfile", "dockerfile"),
        ("docker/Dockerfile.cuda", "dockerfile"),
        ("images/train.Dockerfile", "dockerfile"),
        ("Containerfile", "dockerfile"),
        ("docker-compose.yml", None),
        ("Pipfile", None),
    ],
)
def test_pin_file_kind(path: str, kind: str | None) -> None:
    assert pin_file_kind(path) == kind


PYPROJECT = """\
[project]
name = "app"
dependencies = [
    "numpy>=2",
    "torch==2.13.0; python_version >= '3.10'",
]

[project.optional-dependencies]
gpu = ["torch[opt-einsum]==2.13.0"]

[dependency-groups]
dev = [{include-group = "test"}, "torch>=2.1"]
test = ["pytest"]
"""


def test_pyproject_pep621_optional_and_dependency_groups() -> None:
    pins = find_torch_pins({"pyproject.toml": PYPROJECT})
    assert [(p.side, p.line) for p in pins] == [
        ("torch==2.13.0", 5),
        ("torch[opt-einsum]==2.13.0", 9),
        ("torch>=2.1", 12),
    ]
    # Extras and a range beside the exact pins are one torch, not a conflict.
    assert effective_pin(pins) == (pins[0], [])


POETRY = """\
[tool.poetry.dependencies]
python = "^3.10"
torch = {version = "2.13.0", source = "pytorch"}

[tool.poetry.group.gpu.dependencies]
torch = "^2.13"

[[tool.poetry.source]]
name = "pytorch"
url = "https://download.pytorch.org/whl/cu121"
"""


def test_poetry_dependencies_groups_and_sources() -> None:
    exact, caret = find_torch_pins({"pyproject.toml": POETRY})
    assert (exact.side, exact.version, exact.line) == ("torch==2.13.0", "2.13.0", 3)
    assert exact.index_url == "https://download.pytorch.org/whl/cu121"
    assert (caret.specifier, caret.version, caret.line) == ("<3,>=2.13", None, 6)
    bumped = POETRY.replace('version = "2.13.0"', 'version = "2.14.1"')
    bump = detect_bump({"pyproject.toml": POETRY}, {"pyproject.toml": bumped})
    assert bump is not None
    assert (bump.baseline, bump.candidate) == ("torch==2.13.0", "torch==2.14.1")


def test_uv_index_is_recorded_for_pep621_pins() -> None:
    text = (
        '[project]\nname = "a"\ndependencies = ["torch==2.13.0"]\n'
        '[tool.uv.sources]\ntorch = [{index = "pt-cpu"}]\n'
        '[[tool.uv.index]]\nname = "pt-cpu"\nurl = "https://download.pytorch.org/whl/cpu"\n'
    )
    [pin] = find_torch_pins({"pyproject.toml": text})
    assert pin.index_url == "https://download.pytorch.org/whl/cpu"


def test_invalid_toml_is_an_input_error() -> None:
    with pytest.raises(InputError) as info:
        find_torch_pins({"pyproject.toml": "[project\n"})
    assert info.value.file == "pyproject.toml"


def test_bump_in_requirements_and_constraints() -> None:
    base = {"requirements.txt": "torch==2.13.0\n", "constraints.txt": "torch==2.13.0\n"}
    head = {"requirements.txt": "torch==2.14.1\n", "constraints.txt": "torch==2.14.1\n"}
    bump = detect_bump({**base, "README.md": "torch==1.0\n"}, head)
    assert bump is not None
    assert (bump.baseline, bump.candidate) == ("torch==2.13.0", "torch==2.14.1")
    assert bump.files == ("constraints.txt", "requirements.txt")
    assert bump.message == (
        "torch pin changed: torch==2.13.0 -> torch==2.14.1 in constraints.txt, requirements.txt"
    )


@pytest.mark.parametrize(
    ("base", "head"),
    [
        ({"requirements.txt": "numpy==1\n"}, {"requirements.txt": "numpy==2\n"}),
        ({"requirements.txt": "torch==2.13.0\n"}, {"requirements.txt": "torch==2.13.0 # why\n"}),
        ({"requirements.txt": "torch==2.13\n"}, {"requirements.txt": "torch==2.13.0\n"}),
        # A range that moves under an unchanged lock does not change the torch installed.
        (
            {"pyproject.toml": PYPROJECT, "requirements.txt": "torch==2.13.0\n"},
            {
                "pyproject.toml": PYPROJECT.replace(">=2.1", ">=2.2"),
                "requirements.txt": "torch==2.13.0\n",
            },
        ),
        ({}, {}),
    ],
)
def test_no_torch_change_is_none(base: dict[str, str], head: dict[str, str]) -> None:
    assert detect_bump(base, head) is None


def test_added_and_removed_pins() -> None:
    added = detect_bump({}, {"requirements.txt": "torch==2.14.1\n"})
    assert added is not None and (added.baseline, added.candidate) == (None, "torch==2.14.1")
    removed = detect_bump({"requirements.txt": "torch==2.13.0\n"}, {})
    assert removed is not None and (removed.baseline, removed.candidate) == ("torch==2.13.0", None)


def test_conflicting_pins_on_one_side_are_unknown_naming_both_files() -> None:
    base = {"requirements.txt": "torch==2.13.0\n"}
    head = {"requirements.txt": "torch==2.14.1\n", "ci/constraints.txt": "\ntorch==2.13.0\n"}
    result = detect_bump(base, head)
    assert result is not None and result.status == "unknown"
    (reason,) = [u.reason for u in result.unknown if u.side == "head"]
    assert "ci/constraints.txt:2" in reason and "requirements.txt:1" in reason


def test_a_moved_range_with_no_lock_is_unknown() -> None:
    base = {"pyproject.toml": '[project]\nname = "a"\ndependencies = ["torch>=2.13,<2.14"]\n'}
    head = {"pyproject.toml": base["pyproject.toml"].replace("<2.14", "<2.15")}
    result = detect_bump(base, head)
    assert result is not None and result.status == "unknown" and result.run
    assert "range with no lock" in result.message
    # With a lock beside it, the lock says which torch: a known move.
    lock = (FIXTURES / "uv-lock" / "base" / "uv.lock").read_text()
    head_lock = (FIXTURES / "uv-lock" / "head" / "uv.lock").read_text()
    moved = detect_bump({**base, "uv.lock": lock}, {**head, "uv.lock": head_lock})
    assert moved is not None and moved.status == "changed"
    assert (moved.baseline, moved.candidate) == ("torch==2.13.0", "torch==2.14.1")


def test_a_lock_that_the_manifest_range_excludes_is_named() -> None:
    lock = (FIXTURES / "uv-lock" / "head" / "uv.lock").read_text()
    manifest = '[project]\nname = "a"\ndependencies = ["torch>=2.15"]\n'
    result = detect_bump(
        {"requirements.txt": "torch==2.13.0\n"}, {"uv.lock": lock, "pyproject.toml": manifest}
    )
    assert result is not None and result.status == "unknown"
    assert any("excludes torch==2.14.1" in u.reason for u in result.unknown)


FIXTURES = Path(__file__).parent / "fixtures" / "pins"
MOVES = {
    "uv-lock": ("uv.lock", {"torchvision": ("torchvision==0.28.0", "torchvision==0.29.1")}),
    "poetry-lock": ("poetry.lock", {}),
    "pdm-lock": ("pdm.lock", {}),
    "pipfile-lock": ("Pipfile.lock", {}),
    "pylock": ("pylock.toml", {}),
    "conda": ("environment.yml", {"torchvision": ("torchvision==0.28.0", "torchvision==0.29.1")}),
    "pixi-lock": ("pixi.lock", {}),
    "pixi-manifest": ("pixi.toml", {}),
    "dockerfile": ("Dockerfile", {"torchvision": ("torchvision==0.28.0", "torchvision==0.29.1")}),
    "dockerfile-pip": ("docker/train.Dockerfile", {}),
}
NEGATIVE = {  # head -> (status, file named in the answer)
    "malformed-uv-lock": ("unknown", "uv.lock"),
    "ngc-image": ("unknown", "Dockerfile"),
    "pixi-lock-future": ("unknown", "pixi.lock"),
    "comment-only": ("unchanged", None),
    "unrelated-section": ("unchanged", None),
}


def _fixture_repo(tmp_path: Path, case: str) -> Path:
    """A repository whose base commit holds the case's base/ files and whose head commit
    changes only them to head/, beside a pyproject.toml with a torch range in both."""
    root = tmp_path / case
    root.mkdir()
    _git(root, "init", "-q")
    (root / "pyproject.toml").write_text(
        '[project]\nname = "team"\ndependencies = ["torch>=2.13"]\n'
    )
    for side in ("base", "head"):
        for f in (FIXTURES / case / side).rglob("*"):
            if f.is_file():
                target = root / f.relative_to(FIXTURES / case / side)
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(f.read_text())
        _git(root, "add", "-A")
        _git(root, "commit", "-q", "--allow-empty", "-m", side)
    return root


def _pins_json(root: Path) -> dict[str, object]:
    argv = ["--base", "HEAD~1", "--head", "HEAD", "--repo", str(root), "--json"]
    result = CliRunner().invoke(pins_command, argv, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    record: dict[str, object] = json.loads(result.stdout)
    return record


@needs_git
@pytest.mark.parametrize("case", sorted(MOVES))
def test_a_change_only_in_one_pin_format_reports_the_move(tmp_path: Path, case: str) -> None:
    file, companions = MOVES[case]
    record = _pins_json(_fixture_repo(tmp_path, case))
    assert record["status"] == "changed" and record["run"] is True, record
    assert (record["baseline"], record["candidate"]) == ("torch==2.13.0", "torch==2.14.1")
    assert record["files"] == [file] and file in str(record["message"])
    assert record["companions"] == {
        pkg: {"baseline": old, "candidate": new} for pkg, (old, new) in companions.items()
    }


@needs_git
@pytest.mark.parametrize("case", sorted(NEGATIVE))
def test_negative_fixtures_never_read_as_a_move(tmp_path: Path, case: str) -> None:
    status, file = NEGATIVE[case]
    record = _pins_json(_fixture_repo(tmp_path, case))
    assert record["status"] == status, record
    if status == "unknown":
        assert record["run"] is True and record["changed"] is False
        assert record["unknown"][0]["file"] == file  # type: ignore[index]
    else:
        assert record == {
            "changed": False,
            "status": "unchanged",
            "run": False,
            "message": "no torch change",
        }


def _variants(
    lock: str, base_lock: str, head_lock: str
) -> list[tuple[dict[str, str], dict[str, str]]]:
    """The same lock move beside every other shape of tree a pull request may have."""
    ranged = '[project]\nname = "a"\ndependencies = ["torch>=2.13"]\n'
    excluding = '[project]\nname = "a"\ndependencies = ["torch<2.14"]\n'
    broken = head_lock.replace("2.14.1", "2.14.1\x00[[[", 1)
    out = []
    for others_base, others_head in (
        ({}, {}),
        ({"pyproject.toml": ranged}, {"pyproject.toml": ranged}),
        ({"pyproject.toml": ranged}, {"pyproject.toml": excluding}),
        ({"requirements.txt": "torch==2.13.0\n"}, {"requirements.txt": "torch==2.13.0\n"}),
        ({"environment.yml": "dependencies: [pytorch=2.13.0]\n"}, {"environment.yml": "{{{"}),
        (
            {"Dockerfile": "FROM nvcr.io/nvidia/pytorch:25.01-py3\n"},
            {"Dockerfile": "FROM nvcr.io/nvidia/pytorch:25.01-py3\n"},
        ),
    ):
        for head_text in (head_lock, broken):
            out.append(({lock: base_lock, **others_base}, {lock: head_text, **others_head}))
    return out


@pytest.mark.parametrize(
    "case", ["uv-lock", "poetry-lock", "pdm-lock", "pipfile-lock", "pylock", "pixi-lock"]
)
def test_a_lock_that_moves_torch_never_ends_in_no_torch_change(case: str) -> None:
    file = MOVES[case][0]
    base_lock = (FIXTURES / case / "base" / file).read_text()
    head_lock = (FIXTURES / case / "head" / file).read_text()
    for base, head in _variants(file, base_lock, head_lock):
        result = detect_bump(base, head)
        assert result is not None and result.run, (case, sorted(head))
        assert result.status in ("changed", "unknown")


def _git(repo: Path, *args: str) -> None:
    env = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
    subprocess.run(
        ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.invalid", *args],
        check=True,
        capture_output=True,
        env=env,
        timeout=60,
    )


@pytest.fixture()
def repo(tmp_path: Path) -> Path:
    """A throwaway repository whose last commit bumps torch in requirements.txt."""
    root = tmp_path / "repo"
    root.mkdir()
    _git(root, "init", "-q")
    (root / "requirements.txt").write_text("numpy==2.1.0\ntorch==2.13.0\n")
    (root / "src").mkdir()
    (root / "src" / "notes.txt").write_text("torch==0.1\n")  # not a requirements file
    (root / "requirements-big.txt").write_text("torch==0.0.1\n" + "#" * MAX_FILE_BYTES)
    _git(root, "add", "-A")
    _git(root, "commit", "-q", "-m", "base")
    (root / "requirements.txt").write_text("numpy==2.1.0\ntorch==2.14.1\n")
    _git(root, "commit", "-q", "-am", "bump torch")
    return root


@needs_git
def test_files_at_ref_reads_only_pin_files_and_skips_huge_ones(repo: Path) -> None:
    assert files_at_ref(repo, "HEAD~1") == {"requirements.txt": "numpy==2.1.0\ntorch==2.13.0\n"}
    tree = tree_at_ref(repo, "HEAD~1")
    assert (
        list(tree.unread) == ["requirements-big.txt"]
        and "read limit" in tree.unread["requirements-big.txt"]
    )
    with pytest.raises(InputError, match="no-such-ref"):
        files_at_ref(repo, "no-such-ref")
    with pytest.raises(InputError, match="--output"):
        files_at_ref(repo, "--output=x")


@needs_git
def test_pins_cli_between_git_refs_writes_github_output(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "github_output"
    monkeypatch.setenv("GITHUB_OUTPUT", str(out))
    argv = ["--base", "HEAD~1", "--head", "HEAD", "--repo", str(repo), "--json"]
    result = CliRunner().invoke(pins_command, argv, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    record = json.loads(result.stdout)
    assert record["changed"] is True
    assert (record["baseline"], record["candidate"]) == ("torch==2.13.0", "torch==2.14.1")
    assert record["files"] == ["requirements.txt"]
    assert record["message"].startswith("torch pin changed")
    lines = out.read_text().splitlines()
    assert {"changed=true", "baseline=torch==2.13.0", "candidate=torch==2.14.1"} <= set(lines)


@needs_git
def test_pins_cli_no_change_and_bad_ref(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GITHUB_OUTPUT", raising=False)
    argv = ["--base", "HEAD", "--head", "HEAD", "--repo", str(repo), "--json"]
    result = CliRunner().invoke(pins_command, argv, catch_exceptions=False)
    assert result.exit_code == 0
    assert json.loads(result.stdout) == {
        "changed": False,
        "status": "unchanged",
        "run": False,
        "message": "no torch change",
    }
    argv = ["--base", "nope", "--head", "HEAD", "--repo", str(repo)]
    result = CliRunner().invoke(pins_command, argv, catch_exceptions=False)
    assert result.exit_code == 2 and "'nope'" in result.stderr


def test_pins_cli_single_files_and_human_line(tmp_path: Path) -> None:
    old, new = tmp_path / "old.txt", tmp_path / "new.txt"
    old.write_text("--index-url https://download.pytorch.org/whl/cu121\ntorch==2.13.0+cu121\n")
    new.write_text("--index-url https://download.pytorch.org/whl/cu124\ntorch==2.14.1+cu124\n")
    argv = ["--base-file", str(old), "--head-file", str(new)]
    result = CliRunner().invoke(pins_command, [*argv, "--json"], catch_exceptions=False)
    record = json.loads(result.stdout)
    assert (record["baseline"], record["candidate"]) == (
        "torch==2.13.0+cu121",
        "torch==2.14.1+cu124",
    )
    assert record["candidate_index_url"] == "https://download.pytorch.org/whl/cu124"
    result = CliRunner().invoke(pins_command, argv, catch_exceptions=False)
    assert result.stdout.strip() == record["message"]


def test_pins_hand_the_bench_job_each_sides_index_image_and_companions(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What an image of each side needs, as step outputs: the index URLs as the pin file writes
    them (${VAR} kept for the bench job to expand; a literal credential masked), the image a
    FROM pin names, and the companions that moved with torch."""
    old, new = tmp_path / "old.txt", tmp_path / "new.txt"
    old.write_text(
        "--index-url https://${INDEX_USER}:${INDEX_TOKEN}@pypi.example.com/simple\n"
        "torch==2.13.0\ntorchvision==0.28.0\n"
    )
    new.write_text(
        "--index-url https://reader:literal-Token-123@pypi.example.com/simple\n"
        "--extra-index-url https://mirror.example.com/simple\ntorch==2.14.1\ntorchvision==0.29.1\n"
    )
    outputs = tmp_path / "github-output"
    monkeypatch.setenv("GITHUB_OUTPUT", str(outputs))
    argv = ["--base-file", str(old), "--head-file", str(new), "--json"]
    result = CliRunner().invoke(pins_command, argv, catch_exceptions=False)
    record = json.loads(result.stdout)
    assert record["baseline_index_url"] == (
        "https://${INDEX_USER}:${INDEX_TOKEN}@pypi.example.com/simple"
    )
    assert record["candidate_index_url"] == "https://***@pypi.example.com/simple"
    assert record["candidate_extra_index_urls"] == ["https://mirror.example.com/simple"]
    assert record["baseline_companions"] == ["torchvision==0.28.0"]
    assert record["candidate_companions"] == ["torchvision==0.29.1"]
    written = outputs.read_text()
    assert "literal-Token-123" not in written + result.stdout + result.stderr
    assert "candidate_companions=torchvision==0.29.1" in written
    # A pin that is an image: the bench job builds the suite on that base.
    old.write_text("FROM pytorch/pytorch:2.13.0-cuda12.8-cudnn9-runtime\n")
    new.write_text("FROM pytorch/pytorch:2.14.1-cuda12.8-cudnn9-runtime\n")
    dockerfiles = ["--base-file", str(old), "--head-file", str(tmp_path / "Dockerfile")]
    (tmp_path / "Dockerfile").write_text(new.read_text())
    old.rename(tmp_path / "Dockerfile.base")
    dockerfiles[1] = str(tmp_path / "Dockerfile.base")
    result = CliRunner().invoke(pins_command, [*dockerfiles, "--json"], catch_exceptions=False)
    record = json.loads(result.stdout)
    assert record["baseline_image"] == "pytorch/pytorch:2.13.0-cuda12.8-cudnn9-runtime"
    assert record["candidate_image"] == "pytorch/pytorch:2.14.1-cuda12.8-cudnn9-runtime"
    assert (record["baseline"], record["candidate"]) == ("torch==2.13.0", "torch==2.14.1")


def test_pins_cli_options_exit_2_and_an_unmoved_conflict_is_reported(tmp_path: Path) -> None:
    result = CliRunner().invoke(pins_command, ["--base", "HEAD"], catch_exceptions=False)
    assert result.exit_code == 2 and "--head" in result.stderr
    conflicted = tmp_path / "requirements.txt"
    conflicted.write_text('torch==2.13.0; sys_platform == "linux"\ntorch==2.12.0\n')
    argv = ["--base-file", str(conflicted), "--head-file", str(conflicted), "--json"]
    result = CliRunner().invoke(pins_command, argv, catch_exceptions=False)
    record = json.loads(result.stdout)
    assert result.exit_code == 0 and record["status"] == "unchanged"  # nothing moved
    assert "torch==2.12.0" in record["disagreements"][0]


def test_pins_cli_single_unreadable_file_is_unknown(tmp_path: Path) -> None:
    old, new = tmp_path / "base.lock", tmp_path / "uv.lock"
    old.write_text((FIXTURES / "uv-lock" / "base" / "uv.lock").read_text())
    new.write_text("version = 1\n[[package]\n")
    argv = ["--base-file", str(old), "--head-file", str(new), "--json"]
    record = json.loads(CliRunner().invoke(pins_command, argv, catch_exceptions=False).stdout)
    assert record["status"] == "unknown" and record["unknown"][0]["file"] == str(new)
    assert "not valid TOML" in record["unknown"][0]["reason"]


def test_github_output_uses_a_delimiter_for_multiline_values(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "github_output"
    out.write_text("earlier=1\n")
    monkeypatch.setenv("GITHUB_OUTPUT", str(out))
    write_github_output({"one": "a=b", "many": "x\ny"})
    lines = out.read_text().splitlines()
    assert lines[:3] == ["earlier=1", "one=a=b", lines[2]]
    delimiter = lines[2].removeprefix("many<<")
    assert delimiter.startswith("ghadelimiter_") and lines[3:] == ["x", "y", delimiter]
