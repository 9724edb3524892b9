"""setup.py and setup.cfg read statically: the requirements they declare, never by running them.

setup.py: every string of a literal list, tuple or set, or of a literal dict's values, that is
given to `install_requires` or `extras_require` of a `setup(...)` call, directly or through a
module-level name assigned such a literal once. A requirement built at run time (an f-string, a
function's result) is not read here: when a change touches its line, the change scan
(suite/pins/scan.py) makes the answer unknown. setup.cfg: `[options] install_requires` and
`[options.extras_require]`, one requirement per line.
"""

from __future__ import annotations

import ast
import configparser
import re
from collections.abc import Callable, Iterator

from suite.pins.formats import Found, Unreadable

RequirementWord = Callable[[str], "tuple[str, str] | None"]
_KEYWORDS = ("install_requires", "extras_require", "setup_requires")


def read_setup_py(text: str, parse: RequirementWord) -> list[Found]:
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError) as exc:
        raise Unreadable(f"not valid Python: {exc}") from None
    names = _module_literals(tree)
    found = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and _called(node) == "setup"):
            continue
        for keyword in node.keywords:
            if keyword.arg in _KEYWORDS:
                value = names.get(keyword.value.id, keyword.value) if isinstance(
                    keyword.value, ast.Name) else keyword.value  # fmt: skip
                found += _found(value, keyword.arg, parse)
    return found


def _called(node: ast.Call) -> str | None:
    func = node.func
    if isinstance(func, ast.Name):
        return func.id
    return func.attr if isinstance(func, ast.Attribute) else None


def _module_literals(tree: ast.Module) -> dict[str, ast.expr]:
    """Module-level names assigned exactly once."""
    seen: dict[str, list[ast.expr]] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
            if isinstance(target, ast.Name):
                seen.setdefault(target.id, []).append(node.value)
    return {name: values[0] for name, values in seen.items() if len(values) == 1}


def _strings(node: ast.expr) -> Iterator[ast.Constant]:
    """The literal strings of a requirement list (or dict of lists). Raises Unreadable for a
    part built at run time that mentions torch: what it installs cannot be read here."""
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        for element in node.elts:
            yield from _strings(element)
    elif isinstance(node, ast.Dict):
        for value in node.values:
            yield from _strings(value)
    elif isinstance(node, ast.Constant) and isinstance(node.value, str):
        yield node
    elif _TRACKED.search(ast.unparse(node)):
        raise Unreadable(
            f"line {node.lineno}: {ast.unparse(node)[:80]!r} builds a requirement at run time"
        )


_TRACKED = re.compile(r"torch|triton", re.I)


def _found(node: ast.expr, keyword: str, parse: RequirementWord) -> list[Found]:
    out = []
    for constant in _strings(node):
        text = str(constant.value).strip()
        try:
            parsed = parse(text)
        except Unreadable as exc:
            raise Unreadable(f"line {constant.lineno}: {keyword}: {exc}") from None
        if parsed is not None:
            where = f"line {constant.lineno} ({keyword})"
            out.append(Found(parsed[0], parsed[1], constant.lineno, where, "manifest"))
    return out


def read_setup_cfg(text: str, parse: RequirementWord) -> list[Found]:
    config = configparser.ConfigParser(interpolation=None)
    try:
        config.read_string(text)
    except configparser.Error as exc:
        raise Unreadable(f"not a valid setup.cfg: {exc}") from None
    values = []
    if config.has_option("options", "install_requires"):
        values.append(("install_requires", config.get("options", "install_requires")))
    if config.has_section("options.extras_require"):
        values += [(f"extras_require.{k}", v) for k, v in config.items("options.extras_require")]
    lines = text.splitlines()
    found = []
    for key, value in values:
        for requirement in (r.strip() for r in value.splitlines()):
            if not requirement or requirement.startswith("#"):
                continue
            try:
                parsed = parse(requirement)
            except Unreadable as exc:
                raise Unreadable(f"{key}: {exc}") from None
            if parsed is not None:
                line = next((i for i, t in enumerate(lines, 1) if requirement in t), 1)
                found.append(Found(parsed[0], parsed[1], line, f"line {line} ({key})", "manifest"))
    return found
