"""The torch pins of a GitHub Actions workflow (.github/workflows/*.yml) and of a composite
action (an action.yml under .github/): the `pip install` requirements of its `run:` steps, and
the image a job runs in (`container:`) where the image's tag says which torch it holds. Each job
is a part of the file (suite/pins/environments.py); a composite action's steps are the part
`action`.

A command is read as the runner gives it to the shell, with the values this file gives:
`${{ env.NAME }}` and the shell's `$NAME` from the literal `env:` of the workflow, the job and
the step (the step's wins over the job's, the job's over the workflow's), and
`${{ matrix.KEY }}` from the values the job's `strategy.matrix` lists for KEY, its `include:`
entries' too. A torch requirement that uses a matrix key is one pin per value, each an
environment of its own (`test[torch=2.4.1]`), as the matrix runs each.

Unreadable (the caller fails closed on a changed file that cannot be read): YAML that does not
parse or is not a mapping; a requirement that may name a tracked package and uses a value this
file does not give (`${{ inputs.v }}`, `${{ vars.… }}`, `${{ steps.… }}`, an env value that is
itself an expression, a matrix given as an expression, a plain YAML number that GitHub renders
otherwise than it is written: 2.10 is the number 2.1); a container image with torch in its name
and an expression in its reference. A word that names no tracked package is skipped whatever it
holds. Steps that use an action (`uses:`) and steps run by a shell that is not a POSIX shell or
PowerShell (`shell: python`) are not read: the scan (suite/pins/scan.py) answers for their lines.
"""

from __future__ import annotations

import math
import re
from collections import ChainMap
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from itertools import product
from pathlib import PurePosixPath
from typing import Any

import yaml

from suite.core.yamlsafe import YamlProblem, _Loader, load_yaml
from suite.pins.dockerfile import (
    image_found,
    may_name_tracked,
    pip_requirements,
    shell_words,
    substitute,
)
from suite.pins.formats import Found, Unreadable

ParseRequirement = Callable[[str], "tuple[str, str] | None"]
# A matrix key -> its values as GitHub gives them; None where this file does not say.
Matrix = Mapping[str, "tuple[str, ...] | None"]
Values = Mapping[str, "str | None"]

MAX_COMBINATIONS = 256  # GitHub's own limit on the jobs one matrix makes
_EXPRESSION = re.compile(r"\$\{\{(.*?)\}\}", re.S)
_CONTEXT = re.compile(r"\s*(env|matrix)(?:\.([A-Za-z_][\w-]*)|\[\s*'([^']+)'\s*\])\s*")
# An expression's place in a command while the shell's words are split (an expression holds
# spaces and quotes of its own): private-use characters, which no shell gives a meaning.
_HOLD, _END = "\ue000", "\ue001"
_HELD = re.compile(f"{_HOLD}(\\d+){_END}")
_STR = "tag:yaml.org,2002:str"
_NUMBERS = ("tag:yaml.org,2002:int", "tag:yaml.org,2002:float")
# A plain YAML number GitHub gives as written: 3, 2.5; not 2.10 (2.1), 2.0 (2), 010 or 1e3.
_AS_WRITTEN = re.compile(r"(?:0|[1-9]\d*)(?:\.\d*[1-9])?")
_SHELLS = frozenset({"bash", "sh", "dash", "zsh", "pwsh", "powershell", "cmd"})


class _Opaque(dict[str, Any]):
    """Values an expression gives (`env: ${{ fromJSON(…) }}`, `matrix: ${{ … }}`): any name may
    be set, to a value this file does not give."""

    def __missing__(self, key: str) -> None:
        return None

    def __contains__(self, key: object) -> bool:
        return True


@dataclass(frozen=True)
class _Context:
    """What a job's steps see: its part, env levels (innermost first), matrix and shell."""

    part: str
    envs: tuple[dict[str, str | None], ...]
    matrix: Matrix
    shell: str | None


@dataclass(frozen=True)
class _Command:
    """One shell command of a run: step, continuations joined, each `${{ … }}` held in place."""

    lines: range  # the lines of the file it may be written on
    text: str
    expressions: tuple[str, ...]  # what each held place holds, inside its ${{ }}

    def written(self, word: str) -> str:
        """A word of the command as the file writes it."""
        return _HELD.sub(lambda m: "${{" + self.expressions[int(m[1])] + "}}", word)


def _document(text: str) -> yaml.Node | None:
    """The nodes of a YAML text, with their lines; refused as suite.core.yamlsafe refuses."""
    try:
        load_yaml(text)  # bounded, safe tags only, no key written twice
    except YamlProblem as exc:
        raise Unreadable(f"not valid YAML: {exc}") from None
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        if node is not None:
            loader.construct_document(node)  # merges `<<:` keys into their mappings' nodes
        return node
    finally:
        loader.dispose()


def _get(node: yaml.Node | None, key: str) -> yaml.Node | None:
    """A mapping node's value at a key; None when absent or not a mapping."""
    if not isinstance(node, yaml.MappingNode):
        return None
    found = None
    for name, value in node.value:
        if isinstance(name, yaml.ScalarNode) and name.value == key:
            found = value  # the last, as a merged mapping keeps it
    return found


def _text(node: yaml.Node | None) -> str | None:
    """The text GitHub gives a scalar: a string as written, a plain number only where it is
    written as GitHub renders it; None for anything else."""
    if not isinstance(node, yaml.ScalarNode):
        return None
    value = str(node.value)
    if node.tag == _STR or (node.tag in _NUMBERS and _AS_WRITTEN.fullmatch(value)):
        return value
    return None


def _env(node: yaml.Node | None) -> dict[str, str | None]:
    """The literal values of an `env:` mapping; None for a value this file does not give."""
    if node is None:
        return {}
    if not isinstance(node, yaml.MappingNode):
        return _Opaque()
    values: dict[str, str | None] = {}
    for name, value in node.value:
        text = _text(value)
        values[str(name.value)] = None if text is None or "${{" in text else text
    return values


def _matrix(node: yaml.Node | None) -> Matrix:
    """Each key of a job's matrix with its values, in its lists and its `include:` entries
    (an `exclude:` leaves values that other combinations keep, so it is not read)."""
    if node is None:
        return {}
    if not isinstance(node, yaml.MappingNode):
        return _Opaque()
    values: dict[str, list[str | None]] = {}
    for name, value in node.value:
        key = str(name.value)
        if key == "exclude":
            continue
        if key != "include":
            items = value.value if isinstance(value, yaml.SequenceNode) else [None]
            values.setdefault(key, []).extend(_text(item) for item in items)
            continue
        entries = value.value if isinstance(value, yaml.SequenceNode) else [value]
        if not all(isinstance(entry, yaml.MappingNode) for entry in entries):
            return _Opaque()  # entries an expression gives may set any key
        for entry in entries:
            for k, v in entry.value:
                values.setdefault(str(k.value), []).append(_text(v))
    return {
        k: None if None in found else tuple(dict.fromkeys(v for v in found if v is not None))
        for k, found in values.items()
    }


def _shell(node: yaml.Node | None) -> str | None:
    """The program of a `shell:` (bash of `bash -el {0}`); "" for one this file does not
    give; None where none is set."""
    if node is None:
        return None
    text = _text(node)
    words = text.split() if text and "${{" not in text else []
    return PurePosixPath(words[0]).name.lower() if words else ""


def _commands(run: yaml.ScalarNode) -> Iterator[_Command]:
    """The commands of a run step, each with the lines of the file it may be on: in a literal
    block (|) each line of the text is a line of the file; any other style may fold lines, so
    a command may be on any line of the scalar."""
    block = run.style in ("|", ">")
    first = run.start_mark.line + (2 if block else 1)
    last = run.end_mark.line + (0 if run.end_mark.column == 0 else 1)
    span = range(first, max(first, last) + 1)
    lines = str(run.value).replace(_HOLD, "\ufffd").splitlines()
    parts: list[str] = []
    start = 0
    for offset, raw in enumerate(lines):
        start = start if parts else offset
        body = raw.rstrip()
        if body.endswith("\\") and offset + 1 < len(lines):
            parts.append(body[:-1])
            continue
        parts.append(body)
        where = range(first + start, first + offset + 1) if run.style == "|" else span
        expressions: list[str] = []

        def hold(found: re.Match[str], held: list[str] = expressions) -> str:
            held.append(found[1])
            return f"{_HOLD}{len(held) - 1}{_END}"

        yield _Command(where, _EXPRESSION.sub(hold, " ".join(parts)), tuple(expressions))
        parts = []


def _reference(expression: str) -> tuple[str, str] | None:
    """("env" or "matrix", name) of `env.NAME`, `matrix['KEY']`; None for any other."""
    found = _CONTEXT.fullmatch(expression)
    return (found[1], found[2] or found[3]) if found else None


def _fill(
    word: str, command: _Command, env: Values, chosen: Mapping[str, str]
) -> tuple[str, list[str]]:
    """A word with the values of its expressions and shell variables, and the expressions and
    variables that have none here (their places kept as the file writes them)."""
    unknown: list[str] = []

    def value(found: re.Match[str]) -> str:
        expression = command.expressions[int(found[1])]
        context, name = _reference(expression) or ("", "")
        given = env.get(name) if context == "env" else chosen.get(name) if context else None
        if given is None:
            unknown.append("${{ " + expression.strip() + " }}")
            return found[0]
        return given

    text, missing = substitute(_HELD.sub(value, word), env)
    return text, unknown + [m if m.startswith("$") else f"${m}" for m in missing]


def _choices(
    word: str, command: _Command, matrix: Matrix, line: int
) -> list[tuple[tuple[str, str], ...]]:
    """Each combination of the values of the matrix keys a word uses ((key, value) pairs)."""
    keys: dict[str, tuple[str, ...]] = {}
    for held in _HELD.findall(word):
        context, name = _reference(command.expressions[int(held)]) or ("", "")
        values = matrix.get(name) if context == "matrix" else None
        if values is not None:
            keys[name] = values
    if math.prod(len(v) for v in keys.values()) > MAX_COMBINATIONS:
        raise Unreadable(
            f"line {line}: run: pip install {command.written(word)}: more than "
            f"{MAX_COMBINATIONS} matrix combinations"
        )
    return list(product(*([(k, v) for v in values] for k, values in keys.items())))


def _probe(text: str, command: _Command) -> str:
    """A word whose unknown expressions are `$` and their words, for may_name_tracked."""
    return _HELD.sub(lambda m: "$" + re.sub(r"[^\w.-]", "", command.expressions[int(m[1])]), text)


def _line_of(written: str, command: _Command, source: Sequence[str]) -> int:
    """The line of the file a word of a command is written on."""
    lines = (n for n in command.lines if n <= len(source) and written in source[n - 1])
    return next(lines, command.lines.start)


def _index(
    index: str | None, command: _Command, env: Values, chosen: Mapping[str, str]
) -> str | None:
    """The index URL a requirement installs from, with the values it uses where they are known."""
    if index is None:
        return None
    text, unknown = _fill(index, command, env, chosen)
    return command.written(index) if unknown else text


def _command_found(
    command: _Command,
    context: _Context,
    env: Values,
    source: Sequence[str],
    parse_requirement: ParseRequirement,
) -> list[Found]:
    """The tracked requirements one command installs, one per matrix value they use."""
    found = []
    for word, index in pip_requirements(shell_words(command.text)):
        written = command.written(word)
        line = _line_of(written, command, source)
        for chosen in _choices(word, command, context.matrix, line):
            text, unknown = _fill(word, command, env, dict(chosen))
            if unknown:
                if may_name_tracked(_probe(text, command)):
                    raise Unreadable(
                        f"line {line}: run: pip install {written}: {unknown[0]} has no value "
                        "this file gives, so what it installs cannot be told"
                    )
                break  # a word that names no tracked package
            try:
                parsed = parse_requirement(text)
            except Unreadable as exc:
                raise Unreadable(f"line {line}: run: pip install {exc}") from None
            if parsed is not None:
                part = context.part
                if chosen:
                    part += "[" + ", ".join(f"{k}={v}" for k, v in chosen) + "]"
                url = _index(index, command, env, dict(chosen))
                found.append(Found(*parsed, line, "run", "manifest", url, part=part))
    return found


def _steps_found(
    steps: yaml.Node | None,
    context: _Context,
    source: Sequence[str],
    parse_requirement: ParseRequirement,
) -> list[Found]:
    found: list[Found] = []
    for step in steps.value if isinstance(steps, yaml.SequenceNode) else []:
        run = _get(step, "run")
        if not isinstance(run, yaml.ScalarNode) or _get(step, "uses") is not None:
            continue
        shell = _shell(_get(step, "shell"))
        shell = context.shell if shell is None else shell
        if shell is not None and shell not in _SHELLS:
            continue
        env = ChainMap(_env(_get(step, "env")), *context.envs)
        for command in _commands(run):
            found += _command_found(command, context, env, source, parse_requirement)
    return found


def _container_found(node: yaml.Node | None, part: str) -> list[Found]:
    """The torch of the image a job runs in, where its name and tag say."""
    image = _get(node, "image") if isinstance(node, yaml.MappingNode) else node
    reference = _text(image)
    if image is None or not reference or not reference.strip():
        return []
    line = image.start_mark.line + 1
    if "${{" in reference:
        if "torch" not in reference.lower():
            return []
        raise Unreadable(
            f"line {line}: container {reference}: an image with torch in its name given by an "
            "expression, so which torch it holds cannot be told"
        )
    return [replace(f, part=part) for f in image_found(reference.strip(), line, where="container")]


def _job_found(
    name: str,
    job: yaml.Node,
    outer: _Context,
    source: Sequence[str],
    parse_requirement: ParseRequirement,
) -> list[Found]:
    shell = _shell(_get(_get(_get(job, "defaults"), "run"), "shell"))
    context = _Context(
        name,
        (_env(_get(job, "env")), *outer.envs),
        _matrix(_get(_get(job, "strategy"), "matrix")),
        outer.shell if shell is None else shell,
    )
    found = _container_found(_get(job, "container"), name)
    return found + _steps_found(_get(job, "steps"), context, source, parse_requirement)


def read_workflow(text: str, parse_requirement: ParseRequirement) -> list[Found]:
    """The torch pins of a workflow's jobs and of a composite action's steps.

    parse_requirement turns a word into (tracked package, requirement text), or None; it raises
    Unreadable for a word that starts like a tracked requirement and does not parse."""
    root = _document(text)
    if not isinstance(root, yaml.MappingNode):
        raise Unreadable("not a mapping: not a workflow or an action")
    source = text.splitlines()
    shell = _shell(_get(_get(_get(root, "defaults"), "run"), "shell"))
    top = _Context("action", (_env(_get(root, "env")),), {}, shell)
    jobs = _get(root, "jobs")
    if jobs is not None and not isinstance(jobs, yaml.MappingNode):
        raise Unreadable(f"line {jobs.start_mark.line + 1}: `jobs` is not a mapping")
    found: list[Found] = []
    for name, job in jobs.value if jobs is not None else []:
        found += _job_found(str(name.value), job, top, source, parse_requirement)
    steps = _get(_get(root, "runs"), "steps")
    return found + _steps_found(steps, top, source, parse_requirement)
