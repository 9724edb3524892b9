"""YAML as the suite reads it: safe tags only, no key written twice in one mapping, and a bounded
amount of work, because a pull request controls most of the YAML it reads (its matrix, its conda
environment file, the policy of a branch).

An alias bomb (anchors nested nine deep, each referring ten times to the one before) composes to
a few dozen nodes but stands for a billion; the loader counts what the document expands to and
refuses it past MAX_EXPANDED nodes, before any code walks it. A key repeated in a mapping would
silently keep the last value (a policy listing latency_p50 twice keeps the looser one); here it
is an error naming both lines.
"""

from __future__ import annotations

from typing import Any

import yaml

MAX_EXPANDED = 1_000_000  # nodes the document stands for, aliases expanded
MAX_BYTES = 8 << 20  # no YAML file the suite reads is near this


class YamlProblem(ValueError):
    """What is wrong with the text, with its line where it has one."""


class _Loader(yaml.SafeLoader):
    def compose_document(self) -> Any:
        node = super().compose_document()
        _check_size(node)
        return node

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue  # `<<:` merges are YAML's own way to repeat keys
            key = self.construct_object(key_node, deep=True)
            try:
                first = seen.get(key)
            except TypeError:  # an unhashable key: the constructor below says so
                continue
            line = key_node.start_mark.line + 1
            if first is not None:
                raise YamlProblem(f"key {key!r} at line {line} repeats the one at line {first}")
            seen[key] = line
        return super().construct_mapping(node, deep=deep)


def _check_size(root: yaml.Node | None) -> None:
    """Refuse a document that expands past MAX_EXPANDED nodes, counting each node once per path
    that reaches it (as walking the loaded data would), without expanding anything."""
    if root is None:
        return
    weight: dict[int, int] = {}
    open_: set[int] = set()  # nodes whose children are being counted
    # Post-order without recursion: an alias chain may be deep.
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        if id(node) in weight:
            continue
        children = _children(node)
        if not children_done and children:
            if id(node) in open_:
                line = node.start_mark.line + 1
                raise YamlProblem(f"an alias at line {line} refers to itself: refused unread")
            open_.add(id(node))
            stack.append((node, True))
            stack.extend((c, False) for c in children if id(c) not in weight)
            continue
        open_.discard(id(node))
        total = 1 + sum(weight.get(id(c), 1) for c in children)
        if total > MAX_EXPANDED:
            line = node.start_mark.line + 1
            raise YamlProblem(
                f"the document expands to more than {MAX_EXPANDED:,} nodes (aliases of aliases "
                f"from line {line}): refused unread"
            )
        weight[id(node)] = total


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return []


def load_yaml(text: str) -> Any:
    """The one document of a YAML text; YamlProblem (with the line) for anything refused, as
    for a syntax error."""
    if len(text) > MAX_BYTES:
        raise YamlProblem(f"{len(text) >> 20} MiB of YAML, above the {MAX_BYTES >> 20} MiB limit")
    try:
        return yaml.load(text, Loader=_Loader)
    except YamlProblem:
        raise
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise YamlProblem(f"invalid YAML{where}") from None
    except RecursionError:
        raise YamlProblem("nested too deeply to read") from None
