"""The CI commands: `pins` (did this change bump torch?) and `plan` (the job matrix).

Registered by suite/cli/main.py; errors become exit codes at the one edge, suite.cli.edge. It
imports no other command module.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from suite.cli.edge import handles_errors
from suite.cli.options import (
    SIZE_CHOICE,
    backend_choice,
    calibration_option,
    policy_options,
    warn_below_resolution,
)
from suite.core.errors import InputError
from suite.github.outputs import write_github_output

if TYPE_CHECKING:
    from suite.core.spec import CellSpec
    from suite.flows.pin_sources import BackendPins
    from suite.workloads.matrix import Matrix

EXIT_CODES = """\b
Exit codes:
  0  done (for pins: whether or not torch changed; read the output)
  2  invalid input: a ref, file, matrix or option (the message names it)
  3  environment problem: git missing, GITHUB_OUTPUT not writable"""


def _read(path: Path, option: str) -> str:
    try:
        return path.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read {option}: {exc}", file=str(path)) from None


@click.command("pins", epilog=EXIT_CODES)
@click.option("--base", metavar="REF", help="Git ref of the baseline (e.g. origin/main).")
@click.option("--head", metavar="REF", help="Git ref of the candidate (e.g. HEAD).")
@click.option(
    "--repo",
    type=click.Path(path_type=Path, file_okay=False),
    default=Path("."),
    show_default=True,
    help="Git repository holding --base and --head.",
)
@click.option("--base-file", type=click.Path(path_type=Path), help="Baseline file, not a ref.")
@click.option("--head-file", type=click.Path(path_type=Path), help="Candidate file, not a ref.")
@click.option(
    "--index-hosts",
    "index_hosts",
    multiple=True,
    metavar="HOSTS",
    help="Index hosts that may receive the index credential besides those the base side's pin "
    "files name (comma- or space-separated, e.g. pkgs.example.com,mirror.example.com:8443; "
    "repeatable).",
)
@click.option("--json", "as_json", is_flag=True, help="Print a JSON record.")
@handles_errors
def pins_command(
    base: str | None,
    head: str | None,
    repo: Path,
    base_file: Path | None,
    head_file: Path | None,
    index_hosts: Sequence[str],
    as_json: bool,
) -> None:
    """Say whether a change moves the torch pin, and from what to what.

    Reads, at two git refs: requirements*.txt, constraints*.txt, *.in, pyproject.toml, setup.py
    and setup.cfg (statically), uv.lock, poetry.lock, pdm.lock, Pipfile.lock, pylock*.toml, conda
    environment*.yml, pixi.toml, pixi.lock, Dockerfiles of any name, and GitHub workflows and
    composite actions (container images, pip installs in run steps); or two single files
    (--base-file/--head-file, read as the head file's name says, else as requirements; .toml as
    pyproject.toml). A changed file that cannot be read, a moved range with no lock, files that
    disagree, environments that moved differently, or a changed line of any file (but
    documentation) that could move torch and that no reader explains (suite/pins/scan.py) give
    `unknown` (exit 0, status unknown, run true), never "no torch change". torchvision,
    torchaudio and triton moves are reported beside torch. With GITHUB_OUTPUT set, also writes
    the step outputs changed, status, run, baseline, candidate, files, message, unknown,
    companions, environments (each with its own sides, for plan --pin-environments) and the
    index URLs.

    An index URL keeps its credential (${VAR} references, or a literal one, masked) only on an
    approved host: a host an index URL of the base side's pin files names, or one of
    --index-hosts. On any other host (or one that is itself a ${VAR}, which cannot be checked)
    it is given without its userinfo, and the bench job, holding the same approved hosts,
    does not install that side at all. The outputs index_hosts (the approved hosts,
    space-separated) and index_notes (a line per such URL) say which.
    """
    from suite.core.index_access import parse_hosts
    from suite.pins.assess import Tree, assess, pin_file_kind, tree_at_ref, tree_of
    from suite.pins.record import pins_record
    from suite.pins.scan import git_changes, text_changes
    from suite.untrusted.shown import shown

    named = parse_hosts(" ".join(index_hosts), option="--index-hosts")
    if base and head and not (base_file or head_file):
        base_tree, head_tree = tree_at_ref(repo, base), tree_at_ref(repo, head)
        changes, unscanned = git_changes(repo, base, head)
        result = assess(base_tree, head_tree, changes, unscanned)
    elif base_file and head_file and not (base or head):
        kind = pin_file_kind(head_file.name) or (
            "pyproject" if head_file.suffix == ".toml" else "requirements"
        )
        key = str(head_file)

        def single(path: Path, option: str) -> Tree:
            return tree_of({key: _read(path, option)}, {key: kind})

        trees = single(base_file, "--base-file"), single(head_file, "--head-file")
        changes = text_changes(key, trees[0].texts.get(key), trees[1].texts.get(key))
        result = assess(*trees, changes)
    else:
        raise InputError(
            "give --base and --head (git refs), or --base-file and --head-file",
            option="--base" if base or head else "--base-file",
        )
    record = pins_record(result, named)
    outputs = {k: _output_value(v) for k, v in record.items()}
    # Names the head chose, space-separated for a shell: each escaped to one printable word.
    outputs["files"] = " ".join(shown(f).replace(" ", "\\x20") for f in record.get("files", []))
    if "index_notes" in record:
        outputs["index_notes"] = "\n".join(record["index_notes"])
    write_github_output(outputs)
    for note in record.get("index_notes", []):
        click.echo(f"warning: {shown(note)}", err=True)
    click.echo(json.dumps(record) if as_json else record["message"])


def _output_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict) or (
        isinstance(value, list) and any(isinstance(v, dict) for v in value)
    ):
        return json.dumps(value, separators=(",", ":"))
    if isinstance(value, list):
        return " ".join(map(str, value))
    return "" if value is None else str(value)


@click.command("plan", epilog=EXIT_CODES)
@click.option(
    "--matrix",
    "matrix_file",
    type=click.Path(path_type=Path),
    help="Matrix file (YAML or JSON). Default: the built-in matrix.",
)
@click.option(
    "--workload",
    "workloads",
    multiple=True,
    metavar="NAME|module:object",
    help="Plan only these workloads (repeatable).",
)
@click.option(
    "--backend",
    "backends",
    multiple=True,
    type=backend_choice(),
    help="Plan only these backends (repeatable).",
)
@click.option("--size", type=SIZE_CHOICE, help="Problem sizes (default: the matrix's).")
@click.option(
    "--max-jobs",
    type=click.IntRange(1, 256),
    default=256,
    show_default=True,
    help="Most jobs in the matrix (GitHub allows 256).",
)
@click.option(
    "--cells-per-job",
    type=click.IntRange(min=1),
    help="Most cells in one job (default: as many jobs as --max-jobs allows).",
)
@click.option(
    "--runners",
    "runners_json",
    metavar="JSON",
    help="Runner labels per backend, over the matrix's runners: (e.g. '{\"cuda\": "
    '["self-hosted", "linux", "h100"]}\'). A backend without labels, other than cpu, is not '
    "planned.",
)
@click.option(
    "--head-matrix",
    type=click.Path(path_type=Path),
    help="The pull request's own matrix, when --matrix is the base branch's: the output "
    "matrix_note names the cells the change adds and removes.",
)
@click.option(
    "--changed-files",
    type=click.Path(path_type=Path, dir_okay=False),
    help="The files the pull request changes, one per line (git diff --name-only BASE HEAD): "
    "the output source_notes names those that did not run for the verdict.",
)
@click.option(
    "--changes",
    "changes_between",
    nargs=2,
    metavar="BASE HEAD",
    help="The pull request's two commits: the files it changes are read from the git "
    "repository --repo names (through the suite's reader of untrusted commits) for "
    "source_notes, in place of --changed-files.",
)
@click.option(
    "--repo",
    type=click.Path(path_type=Path, file_okay=False),
    default=".",
    show_default=True,
    help="With --changes: the git repository that holds the two commits.",
)
@click.option(
    "--pin-files",
    default="",
    metavar="PATHS",
    help="With --changed-files or --changes: the pin files pins read (its files output, "
    "names as it escapes them), left unnamed.",
)
@click.option(
    "--matrix-from",
    type=click.Choice(["base", "head"]),
    default="base",
    show_default=True,
    help="With --changed-files: where the matrix and its workloads came from (head: a matrix "
    "new in the pull request).",
)
@click.option(
    "--pin-environments",
    type=click.Path(path_type=Path, dir_okay=False),
    help="The environments pins found (its record, `pins --json`, or its environments output, "
    "as a file): each backend named under the matrix's pin-source: takes its environment's "
    "move, and one whose environment did not move is not planned.",
)
@policy_options
@calibration_option
@handles_errors
def plan_command(
    matrix_file: Path | None,
    workloads: Sequence[str],
    backends: Sequence[str],
    size: str | None,
    max_jobs: int,
    cells_per_job: int | None,
    runners_json: str | None,
    head_matrix: Path | None,
    changed_files: Path | None,
    changes_between: tuple[str, str] | None,
    repo: Path,
    pin_files: str,
    matrix_from: str,
    pin_environments: Path | None,
    policy_file: Path | None,
    policy_profile: str | None,
    calibration_file: Path | None,
) -> None:
    """Print the GitHub Actions strategy.matrix for a matrix, as one line of JSON.

    Each entry is a job: job, backend, runs-on (from the matrix's runners, or defaults),
    cells (space-separated cell ids, for `ab --cell`) and cell_count. With GITHUB_OUTPUT set,
    also writes the step outputs matrix, name (the matrix's name, for artifact names),
    unplanned, matrix_note, source_notes (one line each: what the pull request changed that
    did not run, from --changes or --changed-files) and pin_notes (with --pin-environments:
    the backends that took their pin-source's move, and those not planned because it did
    not move).
    With a calibration (--calibration, or one in the current directory), warns on stderr
    where a threshold of the policy is below what this runner can resolve.
    """
    from suite.cli.options import checked_select
    from suite.flows.pin_sources import planned_cells, with_sides
    from suite.flows.plan import plan, unplanned, unplanned_note
    from suite.flows.pr_changes import changed_paths, matrix_changes, read_changed, source_notes
    from suite.judge.policy import load_policy

    runners = _runners(runners_json)
    matrix, cells, _ = checked_select(matrix_file, workloads, backends, (), size)
    warn_below_resolution(calibration_file, cells, lambda: load_policy(policy_file, policy_profile))
    skipped = unplanned(matrix, cells, runners)
    runnable = [c for c in cells if c.backend not in skipped]
    pins, pin_notes = _backend_pins(matrix, runnable, pin_environments)
    cells = planned_cells(cells, pins, matrix)
    strategy = plan(matrix, cells, max_jobs=max_jobs, cells_per_job=cells_per_job, runners=runners)
    line = json.dumps(with_sides(strategy, pins), separators=(",", ":"))
    note = unplanned_note(skipped) if skipped else ""
    # The artifact names of a run carry the matrix's name, so that two matrices of one
    # repository neither overwrite nor read each other's results.
    name = re.sub(r"[^A-Za-z0-9_.-]", "-", matrix.name) or "default"
    # Only what this plan runs: a backend with no runners named neither ran nor will.
    planned_backends = [b for b in dict.fromkeys(c.backend for c in cells) if b not in skipped]
    changes = matrix_changes(
        [c for c in cells if c.backend in planned_backends],
        matrix_file,
        head_matrix,
        workloads,
        planned_backends,
        size,
    )
    if changes_between and changed_files is not None:
        raise InputError("give --changes or --changed-files, not both", option="--changes")
    changed = (
        changed_paths(repo, *changes_between) if changes_between else read_changed(changed_files)
    )
    notes = source_notes(
        changed, pin_files.split(), matrix, matrix_file, policy_file, matrix_from == "head"
    )
    outputs = {"matrix": line, "name": name, "unplanned": note, "matrix_note": changes}
    _say_plan(strategy, outputs, {"source_notes": notes, "pin_notes": pin_notes})


def _say_plan(
    strategy: dict[str, Any], outputs: dict[str, str], notes: dict[str, list[str]]
) -> None:
    """plan's step outputs (notes: one line each), its count and warnings, and its line."""
    write_github_output(outputs | {k: "\n".join(v) for k, v in notes.items()})
    planned = sum(job["cell_count"] for job in strategy["include"])
    click.echo(f"{planned} cells in {len(strategy['include'])} jobs", err=True)
    lines = [line for some in notes.values() for line in some]
    for said in (outputs["unplanned"], outputs["matrix_note"], *lines):
        if said:
            click.echo(f"warning: {said}", err=True)
    click.echo(outputs["matrix"])


def _backend_pins(
    matrix: Matrix, cells: Sequence[CellSpec], environments_file: Path | None
) -> tuple[BackendPins, list[str]]:
    """plan's sides per backend from --pin-environments (suite/flows/pin_sources.py), and its
    pin_notes: the backends not planned, those that ran their own environment's move, and those
    the matrix gives none while environments moved differently."""
    from suite.flows.pin_sources import BackendPins, backend_pins, load_environments, skipped_notes

    if environments_file is None:
        return BackendPins(), []
    backends = list(dict.fromkeys(c.backend for c in cells))
    pins = backend_pins(matrix, load_environments(environments_file), backends)
    return pins, [*skipped_notes(pins, cells), *pins.notes]


def _runners(text: str | None) -> dict[str, list[str]]:
    """--runners: a JSON object of backend -> list of labels."""
    if not text or not text.strip():
        return {}
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"not JSON: {exc}", option="--runners") from exc
    if not isinstance(doc, dict) or not all(
        isinstance(v, list) and all(isinstance(x, str) and x for x in v) for v in doc.values()
    ):
        raise InputError(
            'must be an object of backend -> list of labels, e.g. {"cuda": ["self-hosted", '
            '"linux", "h100"]}',
            option="--runners",
        )
    return {str(k): list(v) for k, v in doc.items()}
