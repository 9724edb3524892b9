"""The paired rounds of an A/B: within a round every cell runs on both sides back to back,
the order of the sides flipping each round and from one cell to the next (side_order); rounds
come look by look (suite.judge.sequential) until each cell's timing gates decided, the last
look, or the time budget. A round another process disturbed runs again on both sides."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from suite.core.records import Role
from suite.core.results import disturbed, record_wall_s
from suite.core.spec import CellSpec
from suite.execute.progress import Progress
from suite.execute.runner import Run
from suite.judge.gates import paired_rounds, side_status, timing_verdict
from suite.judge.policy import Policy
from suite.judge.sequential import TIMING_GATES, Design


def spent_s(runs: dict[str, Run]) -> float:
    """Worker wall time the rounds have used so far, read from the records: a resumed A/B
    charges its budget exactly as the uninterrupted one would."""
    return sum(run.spent_s() for run in runs.values())


def side_order(round_no: int, position: int) -> tuple[Role, Role]:
    """Which side runs a cell first in a round: flipped each round, and from each cell to the
    next. Flipped per round alone, every side ran right after the other side in every round of
    a matrix (b c b c … then c b c b …), so whatever one side's process leaves behind for a few
    seconds (its exit, its page cache, a helper process it started) fell on the other side
    only, in every round, and did not cancel. Flipped per cell as well, each side of a cell runs
    after a process of its own side in half its rounds and after the other side's in the other
    half."""
    if (round_no + position) % 2 == 0:
        return ("baseline", "candidate")
    return ("candidate", "baseline")


# How often one round runs again when another process disturbed it (ab --reruns): a runner busy
# for longer is busy, and its rounds are then left out of the timing gates, which say so.
DISTURBED_REPEATS = 3


class Rounds:
    """Interleaved paired rounds of every cell that still needs them, look by look."""

    def __init__(self, runs: dict[str, Run], policy: Policy, design: Design, comparable: bool,
                 progress: Progress | None, charged_s: float = 0.0,
                 before_round: Callable[[], None] | None = None,
                 reruns: int | None = None) -> None:  # fmt: skip
        self.reruns = DISTURBED_REPEATS if reruns is None else reruns
        self.runs = runs
        # Called before every round and once after the last: raises when a side it checks
        # changed (suite/flows/ab.py's venv guard), so that no round runs on a patched side.
        self.before_round = before_round
        self.charged_s = charged_s  # spent before the rounds (counting), out of the same budget
        self.policy = policy
        self.design = design
        self.comparable = comparable
        self.progress = progress
        self.budget_exhausted = False
        self.rounds_run: dict[str, int] = {}

    def pair(self, spec: CellSpec, round_no: int, position: int = 0) -> None:
        """Both sides of one round of one cell (the cell's position in the round sets the
        order, side_order); on resume a round is kept only when both
        sides' records are whole, otherwise it is redone on both. A round another process
        disturbed on either side runs again on both, the order kept, up to `reruns` times;
        the kept records say how often."""
        order = side_order(round_no, position)
        kept = {role: self.runs[role].reusable(spec, round_no) for role in order}
        if not all(kept.values()):
            for role in order:
                self.runs[role].discard(spec, round_no)
        repeats = 0
        while True:
            docs, kept_again = {}, False
            for role in order:
                doc, reused = self.runs[role].execute(spec, round_no)
                docs[role], kept_again = doc, kept_again or reused
                if self.progress is not None:
                    label = f"{spec.cell_id} [{role} r{round_no}{'+' * repeats}]"
                    self.progress.finished(label, doc, reused=reused)
            # A round kept on resume was settled when it ran: its reruns happened then.
            calm = not any(disturbed(d) for d in docs.values())
            # A side that did not run the cell gives no timing to protect: running it again
            # shows the same failure, not a calmer round.
            ran = all(d["status"] == "ok" for d in docs.values())
            if calm or not ran or kept_again or repeats >= self.reruns:
                break
            if self.progress is not None:
                self.progress.note(f"{spec.cell_id} r{round_no} disturbed by another process")
                self.progress.total += len(order)  # the rerun is work the count shows
            for role in order:
                self.runs[role].set_aside(spec, round_no)
            repeats += 1
        if repeats:
            for role in order:
                self.runs[role].annotate(spec, round_no, disturbed_repeats=repeats)
        self.rounds_run[spec.cell_id] = round_no + 1

    def needs_more(self, spec: CellSpec) -> bool:
        base = self.runs["baseline"].records(spec)
        cand = self.runs["candidate"].records(spec)
        if not self.comparable or any(side_status(x) != "ok" for x in (base, cand)):
            return False  # no timing verdict can come from more rounds
        for name in TIMING_GATES:
            gate = self.policy.gates.get(name)
            if gate is None or gate.threshold is None:
                continue
            verdict = timing_verdict(gate, base, cand, self.design)
            if verdict is not None and verdict.outcome == "continue":
                return True
        # No paired round yet because every one so far stayed disturbed: later ones may not be.
        unpaired = not paired_rounds("latency_p50", base, cand)[2]
        return unpaired and any(disturbed(r) for r in (*base, *cand))

    def round_cost_s(self, spec: CellSpec) -> float | None:
        """Mean wall time of one round of this cell (both sides), from its records so far."""
        walls = [record_wall_s(r) for role in self.runs for r in self.runs[role].records(spec)]
        rounds = len(self.runs["baseline"].records(spec))
        return sum(walls) / rounds if rounds else None

    def affordable(self, active: list[CellSpec], rounds_to_look: int) -> list[CellSpec]:
        """The cells whose rounds up to the next look still fit the budget, cheapest first:
        an expensive cell (a compiled one) that cannot reach its look gives way to cheap
        cells that can. The costs come from the records, so a resumed A/B chooses the same."""
        if self.design.budget_s is None:
            return active
        left = self.design.budget_s - spent_s(self.runs) - self.charged_s
        costs = {spec.cell_id: self.round_cost_s(spec) for spec in active}
        if any(cost is None for cost in costs.values()):
            # Every cell gets its first round, whatever counting spent: it measures what a
            # round costs, and without it a cell has no status at all.
            return active
        if left <= 0:
            self.budget_exhausted = True
            return []
        admitted: set[str] = set()
        total = 0.0
        for spec in sorted(active, key=lambda s: costs[s.cell_id] or 0.0):
            need = (costs[spec.cell_id] or 0.0) * rounds_to_look
            if total + need <= left:
                admitted.add(spec.cell_id)
                total += need
        if len(admitted) < len(active):
            self.budget_exhausted = True
        return [spec for spec in active if spec.cell_id in admitted]

    def run(self, cells: Sequence[CellSpec]) -> Design:
        active = list(cells)
        done = 0
        for look in self.design.looks:
            while done < look and active:
                active = self.affordable(active, look - done)
                if not active:
                    break
                if self.progress is not None:
                    self.progress.total = max(
                        self.progress.total, self.progress.done_count + 2 * len(active)
                    )
                if self.before_round is not None:
                    self.before_round()
                for position, spec in enumerate(active):
                    self.pair(spec, done, position)
                done += 1
                # Decisions come only at looks, so between looks this drops only the cells
                # that cannot give a timing verdict at all (failed, skipped, unsupported).
                active = [spec for spec in active if self.needs_more(spec)]
            if not active:
                break
        if self.before_round is not None:
            self.before_round()  # and after the last: nothing judged ran on a patched side
        return replace(self.design, budget_exhausted=self.budget_exhausted)
