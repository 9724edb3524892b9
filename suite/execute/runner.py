"""The parent side of a run: plan, probe the environment, run each cell in a fresh worker,
and keep run.json current so that a killed run can be resumed without losing or repeating cells."""

from __future__ import annotations

import glob
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from suite.core.records import FAILED_STATUSES, Result, RunCell, RunRecord, RunStatus
from suite.core.results import (
    DISTURBED_DIR,
    cell_file,
    failure_result,
    new_run_id,
    read_result,
    record_wall_s,
    utc_now,
    write_result,
    write_run,
)
from suite.core.spec import CellSpec
from suite.execute.cell import run_cell, worker_argv
from suite.execute.environment import RunOptions, probe_environment, worker_env
from suite.execute.forkclient import ForkServer, fork_launcher_enabled
from suite.execute.launch import Launcher, Step, run_process
from suite.execute.launchers import node_launcher
from suite.execute.progress import Progress
from suite.execute.run_dir import (
    existing_run,
    keep_inputs,
    new_run_doc,
    pending_entry,
    prepare_dir,
    record_digest,
    reusable_record,
)
from suite.workloads import Resolved, file_part
from suite.workloads.matrix import Matrix, expand


@dataclass
class RunSummary:
    run_id: str
    run_dir: Path
    statuses: dict[str, str]

    @property
    def failed(self) -> list[str]:
        return [c for c, s in self.statuses.items() if s in FAILED_STATUSES]


class Run:
    """One run directory: its run.json kept current after every cell."""

    def __init__(
        self,
        matrix: Matrix,
        options: RunOptions,
        cells: Sequence[CellSpec],
        resolved: dict[str, Resolved],
        environment: dict[str, Any] | None = None,
        extra: RunRecord | None = None,
    ) -> None:
        self.options = options
        if options.nodes is None and matrix.launcher is not None:
            options.nodes = node_launcher(matrix.launcher, matrix.launcher_where)
        self.dir = options.out
        self.path = self.dir / "run.json"
        existing = existing_run(self.path, options.resume)
        prepare_dir(self.dir)
        self.worker_env = worker_env(options)
        self.launcher: Launcher = options.launcher
        self._server: ForkServer | None = None
        if options.launcher is run_process and fork_launcher_enabled():
            # A worker forked from a pre-imported server costs a fork, not an interpreter
            # start and `import torch`: rounds become cheap, and each is still its own process.
            self._server = ForkServer(
                options.interpreter, self.worker_env, self.dir / "logs" / "forkserver.log"
            )
            self.launcher = self._server
        self.environment = environment or probe_environment(
            options, self.dir / "logs", self.launcher
        )
        self.torch_version = self.environment["torch"]["version"]
        self.run_id = existing["run_id"] if existing else (options.run_id or new_run_id())
        self.doc: RunRecord = new_run_doc(
            matrix, options, cells, resolved, self.run_id, self.environment, existing
        )
        self.doc.update(extra or {})
        keep_inputs(self.dir, self._input_files())
        self._index = {(c["cell_id"], c["round"]): c for c in self.doc["cells"]}
        # What each record file was when it was written: --resume keeps only those unchanged.
        self._digests: dict[tuple[str, int], str] = {
            (c["cell_id"], c["round"]): digest
            for c in (existing["cells"] if existing else [])
            if (digest := c.get("sha256"))
        }
        self._records: dict[tuple[str, int], Result] = {}
        # Rounds repeated because another process disturbed them: their records are kept
        # under disturbed/ as evidence, and their time is charged like any round's.
        self._aside_s = math.fsum(
            record_wall_s(read_result(p)) for p in sorted(self.dir.glob(f"{DISTURBED_DIR}/*.json"))
        )
        write_run(self.path, self.doc)

    def _input_files(self) -> list[Path]:
        """The files the run read that a reproduction needs: matrix, plugins, policy."""
        named = [
            self.doc["matrix"]["file"],
            *(file_part(ref) for ref in self.doc["workloads"]),
            (self.doc.get("policy") or {}).get("file"),
        ]
        cwd = Path(self.doc["cwd"])
        return [cwd / f for f in named if f and not str(f).startswith("<")]

    def reusable(self, spec: CellSpec, round_no: int) -> Result | None:
        """The valid record --resume would keep for this round, if any."""
        if not self.options.resume:
            return None
        path = cell_file(self.dir, spec.cell_id, round_no)
        digest = self._digests.get((spec.cell_id, round_no))
        return reusable_record(path, spec, self.torch_version, digest, round_no)

    def discard(self, spec: CellSpec, round_no: int) -> None:
        """Forget a round of a cell (its record file too), so that it runs again."""
        cell_file(self.dir, spec.cell_id, round_no).unlink(missing_ok=True)
        self._records.pop((spec.cell_id, round_no), None)

    def set_aside(self, spec: CellSpec, round_no: int) -> Path:
        """Move a disturbed round's record under disturbed/, so that the round runs again."""
        path = cell_file(self.dir, spec.cell_id, round_no)
        aside = self.dir / DISTURBED_DIR
        aside.mkdir(exist_ok=True)
        attempt = len(list(aside.glob(f"{glob.escape(path.stem)}.a*.json")))
        target = aside / f"{path.stem}.a{attempt}.json"
        path.replace(target)
        doc = self._records.pop((spec.cell_id, round_no), None)
        self._aside_s += record_wall_s(doc) if doc else 0.0
        entry = self._entry(spec, round_no)
        entry["disturbed"] = [*entry.get("disturbed", []), str(target.relative_to(self.dir))]
        write_run(self.path, self.doc)
        return target

    def annotate(self, spec: CellSpec, round_no: int, **fields: Any) -> None:
        """Add fields to a round's record (the repeats it took), keeping its digest current."""
        path = cell_file(self.dir, spec.cell_id, round_no)
        doc = self._records[(spec.cell_id, round_no)]
        doc.update(fields)  # type: ignore[typeddict-item]  # fields of result.schema.json
        write_result(path, doc)
        self._entry(spec, round_no)["sha256"] = record_digest(path)
        write_run(self.path, self.doc)

    def records(self, spec: CellSpec) -> list[Result]:
        """This run's records of the cell so far, in round order."""
        return [d for (cid, _), d in sorted(self._records.items()) if cid == spec.cell_id]

    def spent_s(self) -> float:
        """Worker wall time of the rounds so far, as the records state it."""
        return math.fsum(record_wall_s(d) for d in self._records.values()) + self._aside_s

    def _entry(self, spec: CellSpec, round_no: int) -> RunCell:
        key = (spec.cell_id, round_no)
        if key not in self._index:  # rounds added look by look
            entry = pending_entry(self.dir, spec.cell_id, round_no)
            self.doc["cells"].append(entry)
            self._index[key] = entry
        return self._index[key]

    def _check_source(self, spec: CellSpec, doc: Result, path: Path) -> Result:
        """A cell whose workload file is not the one this run recorded (edited mid-run, or not
        the file the container saw) ran other code: its record is a failure, not evidence.

        Files at other paths are not compared: a built-in runs from the image's own copy."""
        recorded = self.doc["workloads"].get(spec.ref) or {}
        ran = doc.get("source") or {}
        if not recorded.get("sha256") or ran.get("file") != recorded.get("file"):
            return doc
        if ran.get("sha256") == recorded["sha256"]:
            return doc
        failed = failure_result(
            spec,
            self.run_id,
            doc["round"],
            status="failed",
            mode="source-changed",
            message=(
                f"the workload file {ran['file']} ran with sha256 {str(ran.get('sha256'))[:12]}, "
                f"but this run recorded {recorded['sha256'][:12]} when it started; "
                "rerun with the file unchanged"
            ),
            started_at=doc["started_at"],
            wall_s=doc["wall_s"],
        )
        write_result(path, failed)
        return failed

    def execute(self, spec: CellSpec, round_no: int) -> tuple[Result, bool]:
        """Run one cell (or keep its valid record when resuming); returns (record, reused)."""
        path = cell_file(self.dir, spec.cell_id, round_no)
        doc = self.reusable(spec, round_no)
        reused = doc is not None
        if doc is None:
            availability = self.environment["backends"].get(spec.backend, {})
            if not availability.get("available", False):
                reason = availability.get("reason") or "backend not available"
                doc = failure_result(
                    spec,
                    self.run_id,
                    round_no,
                    status="skipped",
                    mode="unavailable",
                    message=reason,
                    started_at=utc_now(),
                    wall_s=0.0,
                )
                write_result(path, doc)
            else:
                if self.options.progress is not None:
                    self.options.progress.starting(spec.cell_id)
                doc = run_cell(
                    spec,
                    self.run_id,
                    self.dir,
                    self.options,
                    self.worker_env,
                    round_no,
                    self.launcher,
                )
                doc = self._check_source(spec, doc, path)
        # The parent's view of the cell's wall time: process start and teardown included.
        harness = doc.get("harness") or {}
        entry = self._entry(spec, round_no)
        entry["status"] = doc["status"]
        entry["wall_s"] = harness.get("parent_wall_s", doc["wall_s"])
        entry["sha256"] = record_digest(path)
        self._records[(spec.cell_id, round_no)] = doc
        write_run(self.path, self.doc)
        return doc, reused

    def trace(self, spec: CellSpec, trace_dir: Path) -> Path | None:
        """Profile one more steady-state step of this cell; return its Chrome trace."""
        trace_dir.mkdir(parents=True, exist_ok=True)
        stem = f"{spec.cell_id}.{self.doc.get('side', 'run')}"
        trace = trace_dir / f"{stem}.trace.json"
        result = trace_dir / f"{stem}.result.json"
        argv = worker_argv(self.options.interpreter, spec, result, self.run_id, 0)
        argv += ["--trace", str(trace)]
        self.launcher(
            Step(
                argv,
                log_path=trace_dir / f"{stem}.log",
                timeout_s=self.options.timeout_s or spec.timeout_s,
                env=self.worker_env,
            ),
        )
        return trace if trace.is_file() else None

    def finish(self, status: RunStatus = "complete") -> None:
        self.doc["status"] = status
        self.doc["finished_at"] = utc_now()
        write_run(self.path, self.doc)

    def close(self) -> None:
        """Stop this run's fork server; a later call starts a new one."""
        if self._server is not None:
            self._server.close()


def run_matrix(
    matrix: Matrix,
    options: RunOptions,
    *,
    cells: Sequence[CellSpec] | None = None,
    resolved: dict[str, Resolved] | None = None,
    environment: dict[str, Any] | None = None,
) -> RunSummary:
    if cells is None or resolved is None:
        cells, resolved = expand(matrix)
    run = Run(matrix, options, cells, resolved, environment)
    progress = options.progress or Progress(len(cells) * len(options.rounds), stream=None)
    statuses: dict[str, str] = {}
    try:
        for round_no in options.rounds:
            for spec in cells:
                doc, reused = run.execute(spec, round_no)
                statuses[spec.cell_id] = doc["status"]
                progress.finished(spec.cell_id, doc, reused=reused)
    except BaseException:
        run.finish("interrupted")
        raise
    finally:
        run.close()
    run.finish()
    progress.done()
    return RunSummary(run.run_id, run.dir, statuses)
