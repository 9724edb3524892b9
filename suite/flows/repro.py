"""Reproducing one cell of a finished run: finding its record, the exact command line that reruns
it (a `docker run` line when the run was inside an image), and running that line into a new run
directory beside the original, RESULTS/repro/CELL_ID/RUN_ID, never over it."""

from __future__ import annotations

import difflib
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from suite.core.errors import EnvironmentProblem, InputError
from suite.core.results import cell_file, new_run_id, read_result, read_run
from suite.execute.launch import Step
from suite.workloads import file_part

REPRO_DIR = "repro"
# In an ab directory the candidate comes first: a decision is about the candidate.
AB_SIDES = ("candidate", "baseline")
DEFAULT_CELL_TIMEOUT_S = 600.0
SLACK_S = 120.0


@dataclass(frozen=True)
class Located:
    run_dir: Path
    side: str | None  # "candidate" or "baseline" in an ab directory, else None
    run: dict[str, Any]
    record: dict[str, Any] | None  # None while the cell is pending
    record_file: Path


@dataclass(frozen=True)
class Plan:
    cell_id: str
    argv: list[str]  # torch-matrix run ...
    out: Path
    image: dict[str, Any] | None
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


def _round(cell: dict[str, Any]) -> int:
    return int(cell["round"])


def image_of(located: Located) -> dict[str, Any] | None:
    """The image the cell ran in: the record's own, else the run's environment's."""
    for image in ((located.record or {}).get("image"), located.run["environment"].get("image")):
        if isinstance(image, dict) and (image.get("digest") or image.get("reference")):
            return image
    return None


def _absolute(path: str, cwd: str | None) -> Path:
    p = Path(path)
    return p if p.is_absolute() or not cwd else Path(cwd) / p


def cell_argv(run: dict[str, Any], cell_id: str, out: Path, python: str | None) -> list[str]:
    """`torch-matrix run` for just this cell, with the run's matrix, workloads, profile and
    limits; paths absolute (against the run's cwd) so the line works from anywhere."""
    argv = ["torch-matrix", "run"]
    cwd = run.get("cwd")
    if not run["matrix"]["file"].startswith("<"):
        argv += ["--matrix", str(_absolute(run["matrix"]["file"], cwd))]
    for ref in run["workloads"]:
        target = file_part(ref)
        if target is not None:
            ref = f"{_absolute(target, cwd)}:{ref.rsplit(':', 1)[1]}"
        argv += ["--workload", ref]
    argv += ["--cell", cell_id, "--size", run["profile"]]
    options = run.get("options") or {}
    if options.get("timeout_s"):
        argv += ["--timeout", f"{options['timeout_s']:g}"]
    if options.get("memory_limit_bytes"):
        argv += ["--memory-limit", f"{options['memory_limit_bytes'] / 2**30:.4f}"]
    if python:
        argv += ["--python", python]
    return [*argv, "--out", str(out)]


# The reproduce line writes into RUN_DIR/repro/CELL_ID/<UTC time of the paste>: the same text
# in the decision, the PR comment and `repro`'s output, and a fresh folder each time it runs.
OUT_STAMP = '"$(date -u +%Y%m%dT%H%M%SZ)"'
_STAMP_DIR = "__RUN_TIME__"  # the folder name the shell's timestamp stands in for


def _stamped(line: str, base: Path) -> str:
    """The line with its output folder named by the shell's timestamp at paste time."""
    return line.replace(
        shlex.quote(str(base / _STAMP_DIR)), f"{shlex.quote(str(base))}/{OUT_STAMP}"
    )


def make_plan(
    located: Located, cell_id: str, out: Path | None = None, *, host: bool = False
) -> Plan:
    """How to rerun the cell: the argv that runs it into out (default: a new
    RUN_DIR/repro/CELL_ID/RUN_ID) and the line to paste, which writes beside it. Every
    reproduce line, in the decision record, the PR comment and `repro`, comes from here. With
    host, the line runs on the host with the side's interpreter even for a run in an image."""
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
    argv = cell_argv(run, cell_id, out, python)
    pasted = cell_argv(run, cell_id, base_out / _STAMP_DIR, python)
    if image is None:
        line = _stamped(shlex.join(pasted), base_out)
        return Plan(cell_id, argv, out, None, backend, {}, {}, line, timeout_s)
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
    ref = image.get("digest") or image["reference"]
    line = _stamped(docker_run_line(ref, backend, pasted, env), base_out)
    return Plan(cell_id, argv, out, image, backend, env, mounts, line, timeout_s)


def host_line(
    run_dir: Path, run: dict[str, Any], record: dict[str, Any] | None, cell_id: str
) -> str:
    """The `torch-matrix run` line that reruns the cell with the side's interpreter (the
    decision record's repro.command), from the same builder as every other line."""
    located = Located(run_dir, None, run, record, cell_file(run_dir, cell_id))
    return make_plan(located, cell_id, host=True).line


def reproduce(plan: Plan) -> tuple[Path, dict[str, Any]]:
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


def docker_repro_line(
    run_dir: Path, run: dict[str, Any], record: dict[str, Any] | None, cell_id: str
) -> str | None:
    """The `docker run` line for a decision record's repro.docker: None when the run was not in
    an image. It is what `repro CELL_ID --results RUN_DIR` prints."""
    located = Located(run_dir, None, run, record, cell_file(run_dir, cell_id))
    if image_of(located) is None:
        return None
    return make_plan(located, cell_id).line
