"""A timing fail stands only when a second look repeats it. The first look is the cell's rounds
inside the whole matrix; the second is the same cell alone, fresh workers on both sides, paired
rounds of its own (an A/B runs it: suite/flows/second_look.py). As PyTorch's HUD waits for two
consecutive breaks before it alerts, a `fail` (or `improved`) of a timing gate is kept only
where the second look gives the same verdict; otherwise the gate is `inconclusive`
(`undecided: unconfirmed`), with both figures in its message. Where no second look ran (runs
made apart and compared, or an A/B from before the second look existed) the verdict is the
first look's and says so."""

from __future__ import annotations

from collections.abc import Sequence

from suite.core.decision_records import GateRecord, SecondLook
from suite.core.loaded import LoadedRun
from suite.core.records import Result
from suite.judge.gates import timing_gate
from suite.judge.policy import Policy
from suite.judge.sequential import TIMING_GATES, Design

# The verdicts a second look must repeat before they stand.
LOOKED_AGAIN = frozenset({"fail", "improved"})


def needs_second_look(gates: Sequence[GateRecord]) -> bool:
    """Whether a cell's gates hold a timing fail or improvement, which a second look checks."""
    return any(g["gate"] in TIMING_GATES and g["verdict"] in LOOKED_AGAIN for g in gates)


def alone_records(
    base: LoadedRun, cand: LoadedRun, cell_id: str
) -> tuple[list[Result], list[Result]]:
    """The second look's records of one cell on both sides; empty where none ran."""
    if base.alone is None or cand.alone is None:
        return [], []
    return base.alone.results.get(cell_id, []), cand.alone.results.get(cell_id, [])


def alone_design(base: LoadedRun, policy: Policy) -> Design:
    recorded = ((base.alone.run if base.alone else {}).get("ab") or {}).get("design")
    return Design.from_dict(recorded) if recorded else policy.design


def second_look(
    policy: Policy,
    gates: list[GateRecord],
    alone: tuple[Sequence[Result], Sequence[Result]],
    design: Design,
    comparable: bool,
) -> list[GateRecord]:
    """The cell's gates with each timing fail or improvement checked against the second look:
    kept where the look repeats it, `inconclusive` where it does not."""
    base, cand = alone
    out: list[GateRecord] = []
    for gate in gates:
        if gate["gate"] not in TIMING_GATES or gate["verdict"] not in LOOKED_AGAIN:
            out.append(gate)
            continue
        spec = policy.gates.get(gate["gate"])
        again = None
        if spec is not None and (base or cand):
            again = timing_gate(spec, base, cand, design, comparable=comparable)
        if again is None:
            out.append({**gate, "message": f"{gate['message']}; one look: no second look ran"})
            continue
        looked: SecondLook = {
            "verdict": again["verdict"],
            "message": again["message"],
            "change": again.get("change"),
            "ci": again.get("ci"),
            "rounds": again.get("rounds"),
        }
        if again["verdict"] == gate["verdict"]:
            out.append(
                {
                    **gate,
                    "message": f"{gate['message']}; repeated alone: {again['message']}",
                    "second_look": looked,
                }
            )
            continue
        out.append(
            {
                **gate,
                "verdict": "inconclusive",
                "undecided": "unconfirmed",
                "message": (
                    f"the {gate['verdict']} inside the matrix did not repeat when the cell ran "
                    f"alone with fresh workers ({again['verdict']}): in the matrix "
                    f"{gate['message']}; alone {again['message']}"
                ),
                "second_look": looked,
            }
        )
    return out
