"""The torch pins of a Dockerfile: FROM images whose tag documents the torch version, and pip
install lines in RUN, in any spelling, with the values that ARG defaults and ENV give the
variables they use (`pip install torch==${TORCH_VERSION}`).

A requirement of a tracked package that uses a variable with no known value (no ARG default, no
ENV, a build argument given only on the command line) cannot be told: the file is unreadable.
Variables elsewhere in a command ($HOME in `cd $HOME && pip install ...`) do not matter.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Callable, Iterator, Mapping
from dataclasses import replace
from pathlib import PurePosixPath

from suite.pins.formats import Found, Unreadable, tracked

# Images whose tag begins with the torch version they hold, as their publishers document it.
_TAG_IS_TORCH = ("pytorch/pytorch", "mosaicml/pytorch")
# Any other image whose name or tag holds torch: the version written after "pytorch"
# (rocm/pytorch:rocm6.1_ubuntu22.04_py3.10_pytorch_2.1.2, …/pytorch-installer-2.4.0:latest), else
# which torch it holds cannot be told.
_TORCH_AFTER_WORD = re.compile(r"pytorch[_-](?:installer[_-])?v?(\d+\.\d+(?:\.\d+)?)", re.I)


# Images whose tag names a container release, not a torch version: cannot tell from the tag.
_TAG_IS_RELEASE = ("nvcr.io/nvidia/pytorch",)
_NAME_END = re.compile(r"[=<>!~\[;@\s]")
_URL = re.compile(r"^(?:(?:git|hg|svn|bzr)\+)?[a-z][a-z0-9+.-]*://", re.I)
_MENTIONS_TRACKED = re.compile(r"torch|triton", re.I)
_SHELLS = ("sh", "bash", "dash", "zsh")
_SEPARATORS = frozenset({"&&", ";", "||", "|", "&"})

# Variable name -> its value where the Dockerfile gives one; None where it is declared without.
Values = Mapping[str, "str | None"]


_HEREDOC = re.compile(r"<<-?\s*[\"']?(\w+)[\"']?")


def _instructions(text: str) -> Iterator[tuple[int, str, str]]:
    """(line, INSTRUCTION, arguments) with continuations joined and comments dropped; a
    BuildKit heredoc (RUN <<EOF ... EOF) joins its lines to the instruction as commands."""
    lines = text.splitlines()
    start, parts = 0, list[str]()
    number = 0
    while number < len(lines):
        raw = lines[number]
        number += 1
        stripped = raw.strip()
        if not parts and (not stripped or stripped.startswith("#")):
            continue
        if parts and stripped.startswith("#"):
            continue  # a comment inside a continued instruction
        start = start if parts else number
        if stripped.endswith("\\"):
            parts.append(stripped[:-1])
            continue
        parts.append(stripped)
        joined = " ".join(parts).strip()
        parts = []
        word, _, rest = joined.partition(" ")
        for delimiter in _HEREDOC.findall(rest) if word.upper() == "RUN" else []:
            body = []
            while number < len(lines) and lines[number].strip() != delimiter:
                body.append(lines[number].strip())
                number += 1
            number += 1  # the delimiter's line
            rest += " ; " + " ; ".join(b for b in body if b and not b.startswith("#"))
        yield start, word.upper(), rest.strip()


def _name_end(value: str, j: int) -> int:
    while j < len(value) and (value[j].isalnum() or value[j] == "_"):
        j += 1
    return j


def _reference(value: str, i: int) -> tuple[str, str, str, int]:
    """At a `$`: (name, modifier such as ':-', its word, index after the reference)."""
    if value[i + 1 : i + 2] != "{":
        end = _name_end(value, i + 1)
        return value[i + 1 : end], "", "", end
    close = value.find("}", i)
    close = len(value) if close < 0 else close
    end = _name_end(value, i + 2)
    rest = value[end:close]
    modifier = next((m for m in (":-", ":+", "-", "+") if rest.startswith(m)), rest)
    return value[i + 2 : end], modifier, rest[len(modifier) :], close + 1


def _expand(name: str, modifier: str, word: str, values: Values) -> tuple[str | None, list[str]]:
    """The text one reference stands for (None when it cannot be known), and the names without a
    known value in the default it used. A name the Dockerfile never sets is unset for
    ${NAME:-default}, but may come from the base image otherwise."""
    if name in values and values[name] is None:
        return None, []  # declared with no value: a build argument given on the command line
    value = values.get(name)
    is_set = bool(value) if modifier.startswith(":") else value is not None
    if modifier in (":-", "-"):
        return (value, []) if is_set else substitute(word, values)
    if modifier in (":+", "+"):
        return substitute(word, values) if is_set else ("", [])
    return (value, []) if modifier == "" else (None, [])


def substitute(value: str, values: Values) -> tuple[str, list[str]]:
    """$NAME, ${NAME}, ${NAME:-default} and ${NAME:+word} replaced from values, and the names
    that have no known value there (their references are kept as written)."""
    out, missing, i = "", list[str](), 0
    while i < len(value):
        if value[i] != "$" or i + 1 == len(value):
            out += value[i]
            i += 1
            continue
        name, modifier, word, end = _reference(value, i)
        text, more = _expand(name, modifier, word, values) if name else (None, [])
        if text is None:
            out += value[i:end]
            missing.append(name or value[i:end])
        else:
            out += text
        missing += more
        i = end
    return out, missing


class _Scope:
    """The variables a line sees: ARGs declared before the first FROM (the only ones FROM lines
    see), and in a stage its ARG and ENV values; a stage built FROM an earlier one inherits that
    stage's ENV, as an image inherits its base's environment."""

    def __init__(self) -> None:
        self.meta: dict[str, str | None] = {}
        self.values: dict[str, str | None] = {}
        self._env: set[str] = set()
        self._stages: dict[str, dict[str, str | None]] = {}
        self._stage: str | None = None
        self._started = False

    def is_stage(self, reference: str) -> bool:
        """Whether a FROM names an earlier stage of this file, not an image."""
        return reference.lower() in self._stages or reference.lower() == self._stage

    def start_stage(self, base: str, name: str | None) -> None:
        if self._stage is not None:
            self._stages[self._stage] = {k: self.values.get(k) for k in self._env}
        inherited = self._stages.get(base.lower(), {})
        self.values, self._env = dict(inherited), set(inherited)
        self._stage, self._started = (name.lower() if name else None), True

    def arg(self, words: list[str]) -> None:
        for word in words:
            name, eq, default = word.partition("=")
            value = _known(default, self.values if self._started else self.meta) if eq else None
            if not self._started:
                self.meta[name] = value
            elif name not in self._env:  # ENV of the same name wins over an ARG
                self.values[name] = value if eq else self.meta.get(name)

    def env(self, words: list[str]) -> None:
        # `ENV NAME value with spaces` (the old form) or `ENV A=1 B=2`; the values of one ENV
        # line see the variables as they were before it.
        pairs = [w.partition("=")[::2] for w in words]
        if words and "=" not in words[0]:
            pairs = [(words[0], " ".join(words[1:]))]
        before = dict(self.values)
        for name, value in pairs:
            self.values[name] = _known(value, before)
            self._env.add(name)


def _known(value: str, values: Values) -> str | None:
    text, missing = substitute(value, values)
    return None if missing else text


def _words(rest: str) -> list[str]:
    """The words of an ARG or ENV line, quotes removed."""
    try:
        return shlex.split(rest)
    except ValueError:
        return rest.split()


def shell_words(command: str) -> list[str]:
    """Shell words, with &&, ;, | and & as words of their own and a comment dropped."""
    lexer = shlex.shlex(command, posix=True, punctuation_chars="&;|")
    lexer.whitespace_split, lexer.commenters = True, ""
    try:
        words = list(lexer)
    except ValueError:
        return []
    cut = next((i for i, w in enumerate(words) if w.startswith("#")), len(words))
    return words[:cut]


def _run_words(rest: str) -> tuple[list[str], bool]:
    """The words of a RUN and whether a shell expands its variables: the exec form
    (["pip", "install", ...]) runs with no shell unless it starts one (["sh", "-c", "..."])."""
    if rest.startswith("["):
        try:
            argv = json.loads(rest)
        except ValueError:
            argv = None
        if isinstance(argv, list) and all(isinstance(w, str) for w in argv):
            shell = len(argv) == 3 and PurePosixPath(argv[0]).name in _SHELLS and argv[1] == "-c"
            return (shell_words(argv[2]), True) if shell else (argv, False)
    return shell_words(rest), True


def pip_requirements(words: list[str]) -> Iterator[tuple[str, str | None]]:
    """(requirement word, index URL) of every `pip install` in a command's words: pip, pip3,
    pip3.11, python -m pip, uv pip, by any path."""
    for i, word in enumerate(words[1:], 1):
        tool = PurePosixPath(words[i - 1]).name
        if word != "install" or not _PIP.fullmatch(tool):
            continue
        # pip applies an --index-url to the whole command, written before or after.
        index, wanted = None, list[str]()
        j = i + 1
        while j < len(words) and words[j] not in _SEPARATORS:
            w = words[j]
            if w in ("--index-url", "-i") and j + 1 < len(words):
                index, j = words[j + 1], j + 2
                continue
            if w in _PIP_OPTIONS_WITH_VALUE:
                j += 2
                continue
            if w.startswith("--index-url="):
                index = w.split("=", 1)[1]
            elif not w.startswith("-"):
                wanted.append(w)
            j += 1
        yield from ((w, index) for w in wanted)


# pip, pip3, pip3.11, and a pip whose version is a variable (pip${PYTHON_VERSION}).
_PIP = re.compile(r"pip(?:3(?:\.\d+)?)?(?:\$\{?\w+\}?)*")
_PIP_OPTIONS_WITH_VALUE = frozenset(
    {"-r", "-c", "-e", "--requirement", "--constraint", "--editable", "-f", "--find-links"}
    | {"--extra-index-url", "--target", "-t", "--prefix", "--root", "--platform"}
    # pip's other options that take a value, and uv pip's: a value is never a requirement
    | {"--cache-dir", "--src", "--log", "--proxy", "--retries", "--timeout", "--exists-action"}
    | {"--trusted-host", "--cert", "--client-cert", "--python-version", "--implementation"}
    | {"--abi", "--upgrade-strategy", "--no-binary", "--only-binary", "--progress-bar"}
    | {"--config-settings", "-C", "--global-option", "--python", "-p", "--report"}
    | {"--root-user-action", "--use-feature", "--use-deprecated", "--keyring-provider"}
    | {"--torch-backend", "--index-strategy", "--resolution", "--prerelease", "--index"}
    | {"--default-index", "--extra-index", "--exclude-newer", "--overrides", "--group"}
)


def may_name_tracked(word: str) -> bool:
    """Whether a pip argument that holds an unknown variable may install a tracked package."""
    if _URL.match(word):
        return bool(_MENTIONS_TRACKED.search(word))
    name = _NAME_END.split(word, maxsplit=1)[0]
    if "$" in name:
        return bool(_MENTIONS_TRACKED.search(name))
    return tracked(name) is not None


def _image(reference: str) -> tuple[str, str]:
    """(repository without docker.io, tag) of an image reference; tag "" when absent."""
    name = reference.split("@", 1)[0]
    last = name.rsplit("/", 1)[-1]
    repo, tag = name.rsplit(":", 1) if ":" in last else (name, "")
    for prefix in ("docker.io/", "index.docker.io/", "registry-1.docker.io/"):
        repo = repo.removeprefix(prefix)
    return repo, tag


def _from_found(line: int, rest: str, scope: _Scope) -> list[Found]:
    """The torch an image of a FROM line holds, when its tag says; the stage it starts."""
    words = [w for w in rest.split() if not w.startswith("--")]
    image = words[0] if words else ""
    stage = words[2] if len(words) > 2 and words[1].lower() == "as" else None
    resolved = _known(image, scope.meta)
    if resolved is None:
        raise Unreadable(f"line {line}: FROM {image}: a build argument without a default")
    earlier = scope.is_stage(resolved)
    scope.start_stage(resolved, stage)
    if earlier:  # its torch, if any, was read in that stage
        return []
    return image_found(resolved, line)


def image_found(reference: str, line: int, where: str = "FROM") -> list[Found]:
    """The torch an image holds, when its name and tag say (a Dockerfile's FROM, a workflow
    job's container); none for an image without torch in its name. Raises Unreadable for an
    image with torch in its name whose tag does not say which."""
    what = f"line {line}: {where} {reference}"
    repo, tag = _image(reference)
    if repo in _TAG_IS_TORCH:
        leading = re.match(r"\d+(?:\.\d+)+", tag)  # 2.13.0-cuda12.8-…, 2.6.0_cu124-…
        if leading is None:
            raise Unreadable(f"{what}: the tag names no torch version")
        return [Found("torch", f"torch=={leading[0]}", line, where, "lock", image=reference)]
    if repo in _TAG_IS_RELEASE:
        raise Unreadable(
            f"{what}: cannot tell the torch version from an NGC release tag (NVIDIA's PyTorch "
            "release notes map it)"
        )
    if "torch" in f"{repo}:{tag}".lower():
        written = _TORCH_AFTER_WORD.search(f"{repo}:{tag}")
        if written is None:
            raise Unreadable(
                f"{what}: an image with torch in its name whose tag does not say which torch it "
                "holds"
            )
        return [Found("torch", f"torch=={written[1]}", line, where, "lock", image=reference)]
    return []


def _run_found(
    line: int,
    rest: str,
    scope: _Scope,
    parse_requirement: Callable[[str], tuple[str, str] | None],
) -> list[Found]:
    words, expands = _run_words(rest)
    found = []
    for word, index in pip_requirements(words):
        text, missing = substitute(word, scope.values) if expands else (word, [])
        if missing:
            if may_name_tracked(word):
                raise Unreadable(
                    f"line {line}: RUN pip install {word}: ${missing[0]} has no ARG default or "
                    "ENV value, so what it installs cannot be told"
                )
            continue
        if index is not None and expands:
            index = _known(index, scope.values) or index
        try:
            parsed = parse_requirement(text)
        except Unreadable as exc:
            raise Unreadable(f"line {line}: RUN pip install {exc}") from None
        if parsed is not None:
            found.append(Found(parsed[0], parsed[1], line, "RUN", "manifest", index))
    return found


def read_dockerfile(
    text: str, parse_requirement: Callable[[str], tuple[str, str] | None]
) -> list[Found]:
    """FROM images whose tag documents the torch version, and `pip install` lines in RUN, each
    with its build stage as its part (the stage's name, else `stage N`).

    parse_requirement turns a word into (tracked package, requirement text), or None; it raises
    Unreadable for a word that starts like a tracked requirement and does not parse."""
    scope = _Scope()
    found: list[Found] = []
    stages = 0
    part: str | None = None  # the stage: its name, else "stage N"
    for line, instruction, rest in _instructions(text):
        if instruction == "ARG":
            scope.arg(_words(rest))
        elif instruction == "ENV":
            scope.env(_words(rest))
        elif instruction == "FROM":
            stages += 1
            words = [w for w in rest.split() if not w.startswith("--")]
            named = len(words) > 2 and words[1].lower() == "as"
            part = words[2] if named else f"stage {stages}"
            found += [replace(f, part=part) for f in _from_found(line, rest, scope)]
        elif instruction == "RUN":
            found += [
                replace(f, part=part) for f in _run_found(line, rest, scope, parse_requirement)
            ]
    return found
