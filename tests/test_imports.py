"""Import rules of the package, read from the source (every import, those inside functions
too): no cycles, and the role rules of .importlinter, which `lint-imports` checks (here and in
.ci/run); each rule is shown to break on a planted import."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
from collections import defaultdict
from pathlib import Path

import pytest

from tests.helpers import REPO

PACKAGE = REPO / "suite"


def _graph() -> dict[str, set[str]]:
    modules = {}
    for file in PACKAGE.rglob("*.py"):
        name = ".".join(file.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__")
        modules[name] = file
    graph: dict[str, set[str]] = defaultdict(set)
    for name, file in modules.items():
        for node in ast.walk(ast.parse(file.read_text())):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            else:
                continue
            for target in targets:
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                if target and target not in (name, "suite"):
                    graph[name].add(target)
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_cycle_finder_finds_a_planted_cycle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_cycles_even_through_imports_inside_functions() -> None:
    assert _cycles(_graph()) == []


def test_the_worker_imports_nothing_that_executes_judges_reports_or_posts() -> None:
    graph = _graph()
    roots = [m for m in graph if m.startswith(("suite.worker", "suite.workloads"))]
    seen, todo = set(roots), list(roots)
    while todo:
        for dep in graph.get(todo.pop(), ()):
            if dep not in seen:
                seen.add(dep)
                todo.append(dep)
    roles = ("execute", "judge", "flows", "report", "github", "pins", "cli")
    assert not {m for m in seen if m.split(".")[1] in roles}, sorted(seen)


def _lint(package: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["lint-imports", "--config", str(REPO / ".importlinter"), "--no-cache"],
        cwd=package.parent, capture_output=True, text=True, timeout=300, check=False,
        env={**os.environ, "PYTHONPATH": str(package.parent)},
    )  # fmt: skip


def test_the_import_rules_hold() -> None:
    found = _lint(PACKAGE)
    assert found.returncode == 0, found.stdout + found.stderr
    assert "0 broken" in found.stdout


@pytest.mark.parametrize(
    ("module", "line", "contract"),
    [
        ("worker/cell.py", "from suite.execute import runner", "The worker"),
        ("judge/gates.py", "import subprocess", "Judging starts no process"),
        ("report/table.py", "from suite.judge import rules", "Reports render records"),
        ("core/results.py", "from suite.flows import ab", "Roles, top to bottom"),
        ("core/spec.py", "from suite.workloads import resolve", "The records and formats"),
        ("core/stats.py", "from suite.worker import measure", "The records and formats"),
    ],
)
def test_a_planted_violation_breaks_its_rule(
    tmp_path: Path, module: str, line: str, contract: str
) -> None:
    copy = tmp_path / "suite"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    target = copy / module
    target.write_text(target.read_text() + f"\n\ndef _planted() -> None:\n    {line}\n")
    found = _lint(copy)
    assert found.returncode != 0
    broken = [b for b in found.stdout.splitlines() if b.endswith("BROKEN")]
    assert any(b.startswith(contract) for b in broken) or contract in found.stdout, found.stdout
