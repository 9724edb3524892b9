"""Reproducing one cell of a finished run: finding its record, the exact command line that reruns
it (a `docker run` line when the run was inside an image), and running that line into a new run
directory beside the original, RESULTS/repro/CELL_ID/RUN_ID, never over it."""

from __future__ import annotations

import difflib
import shlex
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import cast

from suite.core.decision_records import Repro
from suite.core.errors import EnvironmentProblem, InputError
from suite.core.records import ImageRecord, Result, RunCell, RunRecord
from suite.core.results import INPUTS_DIR, cell_file, new_run_id, read_result, read_run
from suite.execute import shell
from suite.execute.launch import Step
from suite.workloads import file_part

REPRO_DIR = "repro"
REPRO_AB_DIR = "repro-ab"  # where a pasted ab line writes, beside baseline/ and candidate/
# In an ab directory the candidate comes first: a decision is about the candidate.
AB_SIDES = ("candidate", "baseline")
DEFAULT_CELL_TIMEOUT_S = 600.0
SLACK_S = 120.0
# role ("baseline", "candidate") -> (run directory, run record)
Sides = Mapping[str, tuple[Path, RunRecord]]


@dataclass(frozen=True)
class Located:
    run_dir: Path
    side: str | None  # "candidate" or "baseline" in an ab directory, else None
    run: RunRecord
    record: Result | None  # None while the cell is pending
    record_file: Path


@dataclass(frozen=True)
class Plan:
    cell_id: str
    argv: list[str]  # torch-matrix run ...
    out: Path
    image: ImageRecord | None
    backend: str
    env: dict[str, str]
    mounts: dict[str, str]  # host path -> "rw" | "ro", for a docker run
    line: str
    timeout_s: float


def locate(results: Path, cell_id: str) -> Located:
    """The cell's round-0 record in a run directory, or in an ab directory's candidate/ then
    baseline/."""
    if (results / "run.json").is_file():
        run_dirs: list[tuple[str | None, Path]] = [(None, results)]
    else:
        run_dirs = [(s, results / s) for s in AB_SIDES if (results / s / "run.json").is_file()]
    if not run_dirs:
        raise InputError(
            "neither a run directory (run.json) nor an ab output directory (candidate/, baseline/)",
            file=str(results),
            option="--results",
        )
    known: list[str] = []
    for side, run_dir in run_dirs:
        run = read_run(run_dir / "run.json")
        entries = sorted((c for c in run["cells"] if c["cell_id"] == cell_id), key=_round)
        if entries:
            path = run_dir / entries[0]["file"]
            pending = entries[0]["status"] == "pending" or not path.is_file()
            return Located(run_dir, side, run, None if pending else read_result(path), path)
        known += [c["cell_id"] for c in run["cells"]]
    close = difflib.get_close_matches(cell_id, sorted(set(known)), n=3)
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    raise InputError(
        f"no cell {cell_id!r} in this run{hint}",
        file=str(run_dirs[0][1] / "run.json"),
        option="CELL_ID",
    )


def _round(cell: RunCell) -> int:
    return int(cell["round"])


def image_of(located: Located) -> ImageRecord | None:
    """The image the cell ran in: as the side's preparation resolved it (with its id and
    recipe), else the record's own, else the run's environment's."""
    candidates = (
        located.run.get("image"),
        located.record.get("image") if located.record else None,
        cast("ImageRecord | None", located.run["environment"].get("image")),
    )
    for image in candidates:
        if isinstance(image, dict) and (image.get("digest") or image.get("reference")):
            return image
    return None


def _absolute(path: str, cwd: str | None) -> Path:
    p = Path(path)
    return p if p.is_absolute() or not cwd else Path(cwd) / p


def input_copy(path: Path, run_dir: Path) -> Path:
    """The copy of an input file (matrix, plugin, policy) that the run kept under INPUTS_DIR, by
    its absolute path, when there is one: a results artifact then holds what its lines name."""
    copy = run_dir / INPUTS_DIR / path.relative_to(path.anchor)
    return copy if copy.is_file() else path


def _inputs(
    run: RunRecord, run_dir: Path | None, root: Path | None
) -> tuple[list[str], str | None]:
    """(--matrix and --workload options, a way to show a path) for a line rerunning the run's
    cells: inputs by their copies in the run directory when it kept them, under the pasting
    folder when root is given."""
    cwd = run.get("cwd")

    def shown(path: str) -> str:
        p = _absolute(path, cwd)
        p = input_copy(p, run_dir) if run_dir is not None else p
        return str(shell.under(p, root))

    argv: list[str] = []
    if not run["matrix"]["file"].startswith("<"):
        argv += ["--matrix", shown(run["matrix"]["file"])]
    for ref in run["workloads"]:
        target = file_part(ref)
        if target is not None:
            ref = f"{shown(target)}:{ref.rsplit(':', 1)[1]}"
        argv += ["--workload", ref]
    policy = run.get("policy") or {}
    file = policy.get("file")
    return argv, shown(file) if file and not str(file).startswith("<") else None


def _limits(run: RunRecord) -> list[str]:
    options = run.get("options") or {}
    argv = []
    if options.get("timeout_s"):
        argv += ["--timeout", f"{options['timeout_s']:g}"]
    if options.get("memory_limit_bytes"):
        argv += ["--memory-limit", f"{options['memory_limit_bytes'] / 2**30:.4f}"]
    return argv


def cell_argv(
    run: RunRecord,
    cell_id: str,
    out: Path,
    python: str | None,
    *,
    run_dir: Path | None = None,
    root: Path | None = None,
) -> list[str]:
    """`torch-matrix run` for just this cell, with the run's matrix, workloads, profile and
    limits; paths absolute (against the run's cwd), or under the pasting folder for those below
    root, so the line works from anywhere (or from the results folder)."""
    inputs, _ = _inputs(run, run_dir, root)
    argv = ["torch-matrix", "run", *inputs, "--cell", cell_id, "--size", run["profile"]]
    argv += _limits(run)
    if python:
        argv += ["--python", python]
    return [*argv, "--out", str(out)]


def make_plan(
    located: Located,
    cell_id: str,
    out: Path | None = None,
    *,
    host: bool = False,
    root: Path | None = None,
    role: str | None = None,
) -> Plan:
    """How to rerun the cell: the argv that runs it into out (default: a new
    RUN_DIR/repro/CELL_ID/RUN_ID) and the line to paste, which writes beside it into a folder
    named by the time of the paste. Every reproduce line, in the decision record, the PR comment
    and `repro`, comes from here. With host, the line runs on the host with the side's
    interpreter even for a run in an image; with root, the line names what lies below root by
    the folder it is pasted in (a downloaded results artifact), never by the runner's paths."""
    from suite.execute.docker import IMAGE_BASE_VAR, docker_run_line, image_env
    from suite.execute.environment import PROBE_TIMEOUT_S, WORKER_ENV
    from suite.execute.mounts import mounts_for

    base_out = (located.run_dir / REPRO_DIR / cell_id).absolute()
    out = (out or base_out / new_run_id()).absolute()
    image = None if host else image_of(located)
    run = located.run
    backend = located.record["spec"]["backend"] if located.record else cell_id.rsplit("@", 1)[-1]
    timeout = (run.get("options") or {}).get("timeout_s") or DEFAULT_CELL_TIMEOUT_S
    timeout_s = float(timeout) + PROBE_TIMEOUT_S + SLACK_S
    # Inside an image its own python runs the cells, so no --python.
    python = run.get("interpreter") if image is None else None
    argv = cell_argv(run, cell_id, out, python, run_dir=located.run_dir)
    pasted_out = shell.under(base_out, root) / shell.TIME
    pasted = cell_argv(run, cell_id, pasted_out, python, run_dir=located.run_dir, root=root)
    if image is None:
        return Plan(cell_id, argv, out, None, backend, {}, {}, shell.join(pasted), timeout_s)
    mounts = mounts_for(argv)  # what the container will see, as for every step
    # The variables the run recorded, less what the suite sets itself for every worker.
    env = {
        k: v
        for k, v in (run["environment"].get("env_vars") or {}).items()
        if k not in WORKER_ENV and not k.startswith("TORCH_MATRIX_IMAGE")
    }
    recorded = run["environment"].get("env_vars") or {}
    base = image.get("base") or recorded.get(IMAGE_BASE_VAR)
    env.update(image_env(image.get("reference"), image.get("digest"), base))
    word, variables = image_word(image, role or located.side or "candidate")
    line = docker_run_line(word, backend, pasted, env, variables=variables)
    return Plan(cell_id, argv, out, image, backend, env, mounts, line, timeout_s)


def runnable(image: ImageRecord) -> str:
    """What `docker run` takes for the image, pinned: the registry digest, else the image id."""
    if image.get("digest_kind") == "image-id" and image.get("id"):
        return str(image["id"])
    return str(image.get("digest") or image["reference"])


def image_variable(role: str) -> str:
    """The variable a rebuild line sets to the rebuilt image's id: TORCH_MATRIX_CANDIDATE_IMAGE."""
    return f"TORCH_MATRIX_{role.upper()}_IMAGE"


def _rebuildable(image: ImageRecord) -> bool:
    """An image no registry holds, with the recipe to build it again."""
    return image.get("digest_kind") == "image-id" and isinstance(image.get("recipe"), dict)


def image_word(image: ImageRecord, role: str) -> tuple[str, dict[str, str]]:
    """The image as a line names it, and the shell variables that word needs: an image no
    registry holds is "${TORCH_MATRIX_<ROLE>_IMAGE:-sha256:ID}", the recorded id unless the
    rebuild line (build_lines) set the variable to the id of the image it built."""
    pinned = runnable(image)
    if not _rebuildable(image):
        return pinned, {}
    placeholder, expression = shell.variable(image_variable(role), pinned)
    return placeholder, {placeholder: expression}


def side_spec(run: RunRecord, role: str) -> tuple[str, dict[str, str]]:
    """The ab side that runs the same thing again, and the shell variables it needs: an image by
    digest (one no registry holds by its id, or the rebuilt one), else the side as the A/B was
    given it."""
    image = run.get("image")
    if image and (image.get("digest") or image.get("id")):
        word, variables = image_word(image, role)
        return f"docker:{word}", variables
    spec = str((run.get("ab") or {}).get("spec") or "current")
    return (str(run.get("interpreter") or spec) if spec == "current" else spec), {}


def ab_line(sides: Sides, cell_id: str, root: Path | None) -> str:
    """The `torch-matrix ab` line that repeats the paired comparison of one cell on the same two
    sides (role -> (run directory, run record)): for a timing or memory regression, where one
    side alone shows nothing."""
    cand_dir, cand_run = sides["candidate"]
    argv = ["torch-matrix", "ab"]
    variables: dict[str, str] = {}
    for role, (_, run) in sides.items():
        spec, needed = side_spec(run, role)
        variables.update(needed)
        argv += [f"--{role}", spec]
        indexes = (run.get("ab") or {}).get("indexes") or {}
        if indexes.get("index_url"):
            argv += [f"--{role}-index-url", indexes["index_url"]]
        for url in indexes.get("extra_index_urls") or []:
            argv += [f"--{role}-extra-index-url", url]
    if not any(a.startswith("docker:") for a in argv):  # an image holds what it was built with
        extra = [
            r
            for _, run in sides.values()
            for r in (run.get("ab") or {}).get("with_requirements") or []
        ]
        for requirement in dict.fromkeys(extra):
            argv += ["--with", requirement]
    inputs, policy = _inputs(cand_run, cand_dir, root)
    argv += [*inputs, "--cell", cell_id, "--size", cand_run["profile"]]
    if policy:
        argv += ["--policy", policy]
    profile = (cand_run.get("policy") or {}).get("profile")
    if profile:
        argv += ["--profile", profile]
    argv += _limits(cand_run)
    out = shell.under((root or cand_dir.parent) / REPRO_AB_DIR / cell_id, root) / shell.TIME
    return shell.join([*argv, "--out", str(out)], variables)


def build_lines(sides: Mapping[str, RunRecord]) -> dict[str, str]:
    """role -> the lines that make a side's image again from its recipe and set
    TORCH_MATRIX_<ROLE>_IMAGE to its id, which the run and ab lines then use, for each image no
    registry holds (a registry's digest needs none: docker pulls it)."""
    from suite.execute.images import rebuild_command

    lines = {}
    for role, run in sides.items():
        image = run.get("image")
        if not image or not _rebuildable(image) or not (recipe := image.get("recipe")):
            continue
        tag = image.get("tag") or f"torch-matrix/{recipe.get('backend')}:rebuilt"
        argv, notes = rebuild_command(
            recipe, image.get("base"), image.get("revision"), image.get("source"), tag
        )
        build = shlex.join(["docker", "build", "-q", *argv[2:]])
        comments = "".join(f"# {note}\n" for note in notes)
        lines[role] = f'{comments}export {image_variable(role)}="$(DOCKER_BUILDKIT=1 {build})"'
    return lines


def repro_record(
    sides: Sides,
    cell_id: str,
    record: Result | None,
    failing: set[str],
    root: Path | None,
) -> Repro:
    """The decision's repro for a failing cell: the host line and, for a run in an image, the
    `docker run` line of the candidate (a status or correctness failure shows on one side); the
    `ab` line of both sides for a timing or memory regression; the `docker build` lines of
    images that no registry holds. Lines name what lies below root by the pasting folder."""
    from suite.judge.registry import PERFORMANCE_GATES

    cand_dir, cand_run = sides["candidate"]
    located = Located(cand_dir, None, cand_run, record, cell_file(cand_dir, cell_id))
    paired = failing & set(PERFORMANCE_GATES)
    single = failing - paired
    doc: Repro = {
        "command": make_plan(located, cell_id, host=True).line,
        "docker": make_plan(located, cell_id, root=root, role="candidate").line
        if image_of(located) and single
        else None,
        "root": root.name if root is not None else None,
    }
    if paired:
        doc["ab"] = ab_line(sides, cell_id, root)
    builds = build_lines({role: run for role, (_, run) in sides.items()})
    if builds:
        doc["build"] = builds
    return doc


def reproduce(plan: Plan) -> tuple[Path, Result]:
    """Run the plan (through the docker SDK for an image); return the new record and its path."""
    plan.out.mkdir(parents=True, exist_ok=True)
    log = plan.out / "repro.log"
    if plan.image is not None:
        from suite.execute.docker import ContainerLauncher

        launcher = ContainerLauncher(
            image=plan.image.get("digest") or plan.image["reference"],
            reference=plan.image.get("reference"),
            digest=plan.image.get("digest"),
            base=plan.image.get("base"),
            backend=plan.backend,
        )
        outcome = launcher(Step(plan.argv, log_path=log, timeout_s=plan.timeout_s, env=plan.env))
        if outcome.timed_out:
            raise EnvironmentProblem(f"the reproduction ran past {plan.timeout_s:.0f}s; log: {log}")
        sys.stderr.write(log.read_text("utf-8", errors="replace"))
    else:
        argv = [sys.executable, "-m", "suite", *plan.argv[1:]]
        try:
            subprocess.run(argv, check=False, timeout=plan.timeout_s)
        except subprocess.TimeoutExpired as exc:
            raise EnvironmentProblem(f"the reproduction ran past {plan.timeout_s:.0f}s") from exc
    path = cell_file(plan.out, plan.cell_id)
    if not path.is_file():
        raise EnvironmentProblem(f"the reproduction wrote no record at {path}; see {plan.out}")
    return path, read_result(path)
