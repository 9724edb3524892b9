"""`pins` on the histories of real repositories: how often a torch move is missed.

Each truth in the data file (bench/data/pins_history.json) names a public repository, a commit C
and what a person judged from C's diff: whether it moves the torch the repository installs, and
if so from which version to which. The repositories themselves are not kept here: bring them
(`git clone`) into one folder, each as OWNER+NAME (or NAME), and give that folder.

    python bench/pins_history.py --repos ~/repos                 # judge every truth
    python bench/pins_history.py --repos ~/repos --candidates owner/name --limit 40
                                                                  # commits to judge by hand

For every truth, `pins --base C^ --head C` runs on the real commits and its answer is counted:

    right        a move with the right from -> to, or no move and "no torch change"
    silent miss  a move answered "no torch change": the matrix would not run
    unknown      a move answered unknown (the matrix runs); from -> to exact or not
    spurious     no move, answered unknown
    false alarm  no move, answered changed
    crash        pins raised or exited with an error

It prints one line per truth that was not right, the table, and the time per call (median and
most). Acceptance: 0 silent misses, spurious unknown on at most 10% of non-moves, exact
from -> to on at least 80% of the moves, no crash, each call under 5 s.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

DATA = Path(__file__).with_name("data") / "pins_history.json"
CHECKOUT = Path(__file__).resolve().parent.parent
_VERSION = re.compile(r"(\d+(?:\.\d+)+)")
# What a commit whose diff could touch torch looks like (git log -G; candidates only).
MENTION = r"(py)?torch([_-]?version)?[[:space:]]*([=<>~!@:]|[-_][0-9])"


def repo_dir(root: Path, name: str) -> Path:
    for candidate in (root / name.replace("/", "+"), root / name.split("/")[-1]):
        if (candidate / ".git").exists() or (candidate / "HEAD").exists():
            return candidate
    raise SystemExit(f"{name}: not found under {root} (as OWNER+NAME or NAME)")


def version_of(side: str | None) -> str | None:
    """The public version a pins side names (torch==2.7.0+cu128 -> 2.7.0), normalized."""
    if not side:
        return None
    found = _VERSION.search(side)
    if not found:
        return side
    parts = found[1].split(".")
    while len(parts) > 2 and parts[-1] == "0":
        parts.pop()
    return ".".join(parts)


def run_pins(repo: Path, commit: str) -> tuple[dict[str, Any] | None, float, str]:
    argv = [sys.executable, "-m", "suite", "pins", "--repo", str(repo),
            "--base", f"{commit}^", "--head", commit, "--json"]  # fmt: skip
    start = time.perf_counter()
    # From this checkout: the suite measured is the one beside this script.
    proc = subprocess.run(
        argv, capture_output=True, text=True, timeout=300, check=False, cwd=CHECKOUT
    )
    took = time.perf_counter() - start
    if proc.returncode != 0:
        return None, took, proc.stderr.strip()[-300:]
    return json.loads(proc.stdout), took, ""


def classify(truth: dict[str, Any], record: dict[str, Any] | None) -> tuple[str, bool | None]:
    """(the answer's class, whether from -> to was exact; None for a non-move)."""
    if record is None:
        return "crash", None
    moved, status = truth["moved"], record["status"]
    if not moved:
        return {"unchanged": "right", "unknown": "spurious", "changed": "false alarm"}[status], None
    exact = (version_of(record.get("baseline")), version_of(record.get("candidate"))) == (
        version_of(truth.get("from")),
        version_of(truth.get("to")),
    )
    if status == "unchanged":
        return "silent miss", False
    if status == "unknown":
        return "unknown", exact
    # A move no parsed file names has no one from -> to to check: changed is right.
    right = exact or not truth.get("exact_expected")
    return ("right" if right else "wrong pair"), exact


def judge(root: Path, truths: list[dict[str, Any]]) -> int:
    counts: Counter[str] = Counter()
    times: list[float] = []
    exact = moves = settled = 0
    for truth in truths:
        record, took, error = run_pins(repo_dir(root, truth["repo"]), truth["commit"])
        times.append(took)
        kind, was_exact = classify(truth, record)
        counts[kind] += 1
        if truth["moved"] and truth.get("exact_expected"):
            moves += 1
            exact += bool(was_exact)
            settled += bool(was_exact) and kind == "right"
        if kind != "right":
            said = error or (record or {}).get("message", "")
            print(f"{kind:12} {truth['repo']} {truth['commit'][:10]} "
                  f"(truth: {truth.get('from')} -> {truth.get('to')}): {said[:160]}")  # fmt: skip
    non_moves = sum(not t["moved"] for t in truths)
    print()
    print(f"{len(truths)} pairs from {len({t['repo'] for t in truths})} repositories: "
          f"{len(truths) - non_moves} moves, {non_moves} non-moves")  # fmt: skip
    for kind in ("right", "silent miss", "unknown", "wrong pair", "spurious", "false alarm",
                 "crash"):  # fmt: skip
        print(f"  {kind:12} {counts[kind]}")
    print(f"  exact from -> to on {exact} of the {moves} moves a parsed file names "
          f"({settled} answered changed, {exact - settled} unknown with that pair)")  # fmt: skip
    if non_moves:
        print(f"  spurious unknown on {counts['spurious'] / non_moves:.0%} of non-moves")
    print(f"  time per call: median {statistics.median(times):.2f} s, most {max(times):.2f} s")
    return 1 if counts["silent miss"] or counts["crash"] else 0


def candidates(root: Path, name: str, limit: int) -> None:
    """Commits of a repository whose diff adds or removes a line that mentions torch in a way
    that could pin it, newest first, with those lines: material to judge by hand."""
    repo = repo_dir(root, name)
    log = subprocess.run(
        ["git", "-C", str(repo), "log", "--no-merges", "--format=%H %s", "-E", "-i", "-G", MENTION,
         "-n", str(limit), "--", ".", ":(exclude)*.md", ":(exclude)*.rst", ":(exclude)*.ipynb"],
        capture_output=True, text=True, check=True,
    ).stdout.splitlines()  # fmt: skip
    for line in log:
        commit = line.split()[0]
        diff = subprocess.run(
            ["git", "-C", str(repo), "show", "--format=", "-U0", "--no-color", commit],
            capture_output=True, text=True, check=False,
        ).stdout  # fmt: skip
        mention = re.compile(MENTION.replace("[[:space:]]", r"\s"), re.I)
        print(line[:120])
        current, shown = "", 0
        for d in diff.splitlines():
            if d.startswith("+++ ") or d.startswith("--- "):
                current = d[4:].removeprefix("b/").removeprefix("a/")
            elif d[:1] in "+-" and mention.search(d) and shown < 10:
                print(f"    {current}: {d[:130]}")
                shown += 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repos", type=Path, required=True, help="folder of the repositories")
    parser.add_argument("--data", type=Path, default=DATA, help="the truths (JSON)")
    parser.add_argument("--candidates", metavar="OWNER/NAME", help="list commits to judge")
    parser.add_argument("--limit", type=int, default=30)
    args = parser.parse_args()
    if args.candidates:
        candidates(args.repos, args.candidates, args.limit)
        return 0
    truths = json.loads(args.data.read_text())["truths"]
    return judge(args.repos, truths)


if __name__ == "__main__":
    raise SystemExit(main())
