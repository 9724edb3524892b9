"""A run directory read back: its run record, its results by cell in round order, its counting
processes, the folder their files (saved outputs, per-function totals) lie in, and the second
look at cells an A/B ran again alone (RUN/alone/, a run directory of its own). What judges a run
reads it through this type; no record carries where it was read from."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from suite.core.decision_records import SideEvidence
from suite.core.records import Result, RunRecord
from suite.core.results import ALONE_DIR, COUNTS_DIR, read_result, read_run_dir


@dataclass(frozen=True)
class LoadedRun:
    label: str
    dir: Path
    run: RunRecord
    results: dict[str, list[Result]]  # cell id -> records by round
    counts: dict[str, list[Result]] = field(default_factory=dict)  # counting processes
    # The cells whose timing verdict an A/B looked at again, alone with fresh workers.
    alone: LoadedRun | None = None

    @classmethod
    def load(cls, run_dir: Path, label: str | None = None, *, alone: bool = True) -> LoadedRun:
        """The run in RUN_DIR, with its second look (RUN/alone/) unless ALONE is false."""
        run, records = read_run_dir(run_dir)
        by_cell: dict[str, list[Result]] = defaultdict(list)
        for record in sorted(records, key=lambda r: r["round"]):
            by_cell[record["cell_id"]].append(record)
        counts: dict[str, list[Result]] = defaultdict(list)
        for path in sorted((run_dir / COUNTS_DIR).glob("*~c[0-9]*.json")):
            counted = read_result(path)
            counts[counted["cell_id"]].append(counted)
        typed = run
        torch = typed["environment"]["torch"]["version"]
        label = label or typed.get("label") or f"torch {torch}"
        looked = None
        if alone and (run_dir / ALONE_DIR / "run.json").is_file():
            looked = cls.load(run_dir / ALONE_DIR, label)
        return cls(label, run_dir, typed, dict(by_cell), dict(counts), looked)

    @property
    def rounds(self) -> int:
        return max((len(v) for v in self.results.values()), default=0)

    def evidence(self) -> SideEvidence:
        """The side as the decision names it."""
        env = self.run["environment"]
        return {
            "label": self.label,
            "run_id": self.run["run_id"],
            "torch": env["torch"]["version"],
            "git_version": env["torch"].get("git_version"),
            "dir": str(self.dir),
            "interpreter": self.run.get("interpreter"),
            # What prepared the side knew (recipe, suite, tag) over what the worker saw.
            "image": self.run.get("image") or env.get("image"),
            "rounds": self.rounds,
        }
