"""Import rules of the package, read from the source (every import, those inside functions
too): no cycles, and the worker, which runs inside every cell's process and every image, imports
nothing that executes, judges, reports or talks to GitHub."""

from __future__ import annotations

import ast
from collections import defaultdict

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
    seen, todo = set(), ["suite.worker"]
    while todo:
        for dep in graph.get(todo.pop(), ()):
            if dep not in seen:
                seen.add(dep)
                todo.append(dep)
    forbidden = ("suite.runner", "suite.ab", "suite.compare", "suite.judge", "suite.gates")
    forbidden += ("suite.cli", "suite.docker_side", "suite.report", "suite.github")
    assert not {m for m in seen if m.startswith(forbidden)}, sorted(seen)
