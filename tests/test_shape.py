"""The package's shape, read from the source: one class per name across suite/ (so a name in a
traceback or a review means one thing), no function longer than LONGEST lines (a function
that long mixes steps) and no module longer than MODULE_LINES (one a reader cannot take in at
one sitting: STYLE.md's ~400). Each rule is shown to catch a planted case."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

from tests.helpers import REPO

PACKAGE = REPO / "suite"
LONGEST = 70
MODULE_LINES = 400


def _trees(root: Path) -> dict[str, ast.Module]:
    return {
        file.relative_to(root.parent).as_posix(): ast.parse(file.read_text(encoding="utf-8"))
        for file in sorted(root.rglob("*.py"))
    }


def classes_named_twice(root: Path) -> dict[str, list[str]]:
    where: dict[str, list[str]] = defaultdict(list)
    for path, tree in _trees(root).items():
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                where[node.name].append(path)
    return {name: paths for name, paths in where.items() if len(paths) > 1}


def long_functions(root: Path) -> list[str]:
    found = []
    for path, tree in _trees(root).items():
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > LONGEST:
                    found.append(f"{path}:{node.lineno} {node.name} ({length} lines)")
    return found


def long_modules(root: Path) -> list[str]:
    found = []
    for file in sorted(root.rglob("*.py")):
        length = len(file.read_text(encoding="utf-8").splitlines())
        if length > MODULE_LINES:
            found.append(f"{file.relative_to(root.parent).as_posix()} ({length} lines)")
    return found


def test_no_two_classes_in_the_package_share_a_name() -> None:
    assert classes_named_twice(PACKAGE) == {}


def test_no_function_in_the_package_is_longer_than_the_limit() -> None:
    assert long_functions(PACKAGE) == []


def test_no_module_in_the_package_is_longer_than_the_limit() -> None:
    assert long_modules(PACKAGE) == []


def test_the_rules_catch_a_planted_twin_and_a_planted_long_function(tmp_path: Path) -> None:
    package = tmp_path / "suite"
    (package / "a").mkdir(parents=True)
    (package / "a" / "one.py").write_text("class Side:\n    pass\n")
    body = "".join(f"    x{i} = {i}\n" for i in range(LONGEST))  # LONGEST + 1 lines with the def
    (package / "two.py").write_text(f"class Side:\n    pass\n\n\ndef mixed() -> None:\n{body}")
    (package / "three.py").write_text(f"def short() -> None:\n{body[: body.rindex('    x')]}")
    assert classes_named_twice(package) == {"Side": ["suite/a/one.py", "suite/two.py"]}
    assert long_functions(package) == [f"suite/two.py:5 mixed ({LONGEST + 1} lines)"]


def test_the_module_rule_catches_a_planted_long_module(tmp_path: Path) -> None:
    package = tmp_path / "suite"
    package.mkdir()
    (package / "long.py").write_text("x = 0\n" * (MODULE_LINES + 1))
    (package / "short.py").write_text("x = 0\n" * MODULE_LINES)
    assert long_modules(package) == [f"suite/long.py ({MODULE_LINES + 1} lines)"]
