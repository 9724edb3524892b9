"""The bench jobs' results as the aggregate receives them: folders the jobs uploaded, which
candidate-side code could write into (it runs as the runner's user beside the results folder).

A job's results live at one place only: the root of its artifact (ROOT/ARTIFACT/baseline/run.json
beside ROOT/ARTIFACT/candidate/run.json), or ROOT itself for an `ab --out` folder given by hand.
Anything that looks like results anywhere else (a run.json or decision.json deeper down, say
`candidate/x/torch-matrix-job~m~cuda-1/` inside job cpu-1's artifact, which would have spoken
for a job that died) is a stray: never judged, named, and it holds the decision at defer. A
symbolic link is never followed, and is itself a stray. Each side's run.json also records the
job the plan named (ab --job): claimed_job reads it, for the aggregate to check against the
artifact's own name.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from suite.core.errors import InputError
from suite.untrusted.shown import shown

SIDES = ("baseline", "candidate")
# Result files a job's folder holds where ab writes them: each side's run, the job's decision,
# the rollback rehearsal's run and each side's second-look run.
_EXPECTED = frozenset(
    {"baseline/run.json", "candidate/run.json", "decision.json", "rehearsal/run.json",
     "baseline/alone/run.json", "candidate/alone/run.json"}
)  # fmt: skip
_RESULT_NAMES = frozenset({"run.json", "decision.json"})
SHOWN_STRAYS = 10


@dataclass(frozen=True)
class JobFolders:
    """The jobs' folders, and every stray (a path, relative to its root, for a message)."""

    jobs: tuple[Path, ...]
    strays: tuple[str, ...]

    def stray_lines(self) -> list[str]:
        """The decision's lines for the strays: none, or one naming the first few."""
        if not self.strays:
            return []
        named = ", ".join(self.strays[:SHOWN_STRAYS])
        more = (
            f" and {len(self.strays) - SHOWN_STRAYS} more"
            if len(self.strays) > SHOWN_STRAYS
            else ""
        )
        return [
            f"results outside a job's artifact root, or behind a link, were not judged: {named}"
            f"{more}; a job's results are only its artifact's baseline/ and candidate/ (stray "
            "results could speak for another job)"
        ]


def _is_job(folder: Path) -> bool:
    return not folder.is_symlink() and all(
        not (folder / side).is_symlink()
        and (folder / side / "run.json").is_file()
        and not (folder / side / "run.json").is_symlink()
        for side in SIDES
    )


def _strays(root: Path, jobs: Sequence[Path]) -> list[str]:
    """Every result file, link or folder of results under root that no job owns."""
    out: list[str] = []
    for here, folders, files in os.walk(root, followlinks=False):
        at = Path(here)
        for name in [*folders, *files]:
            path = at / name
            rel = path.relative_to(root).as_posix()
            if path.is_symlink():
                out.append(shown(rel) + " (a link)")
                continue
            if name not in _RESULT_NAMES or path.is_dir():
                continue
            owner = next((j for j in jobs if path.is_relative_to(j)), None)
            if owner is None or path.relative_to(owner).as_posix() not in _EXPECTED:
                out.append(shown(rel))
    return out


def job_folders(roots: Sequence[Path], *, required: bool = True) -> JobFolders:
    """The job folders under the roots (each root, or each folder directly in it), and the
    strays. required: no job found is an error (without a plan, nothing would be judged)."""
    jobs: list[Path] = []
    strays: list[str] = []
    for root in roots:
        if not root.exists():
            raise InputError("no such folder", file=str(root))
        if _is_job(root):
            found = [root]
        else:
            children = sorted(p for p in root.iterdir() if p.is_dir() and not p.is_symlink())
            found = [c for c in children if _is_job(c)]
        jobs += [j for j in found if j not in jobs]
        strays += [f"{shown(root.name)}/{s}" for s in _strays(root, found)]
    if not jobs and required:
        raise InputError(
            "holds no job results (baseline/run.json beside candidate/run.json, at the root of a "
            "job's folder)",
            file=", ".join(map(str, roots)),
        )
    return JobFolders(tuple(jobs), tuple(strays))


RUN_MAX_BYTES = 64 << 20  # a run.json larger than this is no job's: its claim is not read


def claimed_job(folder: Path) -> tuple[str | None, str | None]:
    """The job each side's run.json records (ab --job), baseline's then candidate's: None
    where it records none, or cannot be read as a run record of reasonable size."""

    def one(side: str) -> str | None:
        path = folder / side / "run.json"
        try:
            if path.is_symlink() or path.stat().st_size > RUN_MAX_BYTES:
                return None
            doc = json.loads(path.read_bytes())
        except (OSError, ValueError):
            return None
        ab = doc.get("ab") if isinstance(doc, dict) else None
        job = ab.get("job") if isinstance(ab, dict) else None
        return job if isinstance(job, str) else None

    return one(SIDES[0]), one(SIDES[1])
