"""The torch pins of a Dockerfile: FROM images whose tag documents the torch version (ARG defaults
substituted), and pip install lines in RUN, in any spelling."""

from __future__ import annotations

import shlex
from collections.abc import Callable, Iterator
from pathlib import PurePosixPath

from suite.pins.formats import Found, Unreadable

# Images whose tag begins with the torch version they hold, as their publishers document it.
_TAG_IS_TORCH = ("pytorch/pytorch",)


# Images whose tag names a container release, not a torch version: cannot tell from the tag.
_TAG_IS_RELEASE = ("nvcr.io/nvidia/pytorch",)


def _instructions(text: str) -> Iterator[tuple[int, str, str]]:
    """(line, INSTRUCTION, arguments) with continuations joined and comments dropped."""
    start, parts = 0, list[str]()
    for number, raw in enumerate(text.splitlines(), 1):
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
        yield start, word.upper(), rest.strip()


def _substitute(value: str, args: dict[str, str]) -> str | None:
    """${NAME} / $NAME from ARG defaults; None when one has no default."""
    out, i = "", 0
    while i < len(value):
        if value[i] == "$":
            if value[i + 1 : i + 2] == "{":
                end = value.find("}", i)
                name = value[i + 2 : end].split(":", 1)[0]
                i = end + 1
            else:
                j = i + 1
                while j < len(value) and (value[j].isalnum() or value[j] == "_"):
                    j += 1
                name, i = value[i + 1 : j], j
            if name not in args:
                return None
            out += args[name]
        else:
            out += value[i]
            i += 1
    return out


def _pip_requirements(command: str) -> Iterator[tuple[str, str | None]]:
    """(requirement word, index URL) of every `pip install` in a shell command: pip, pip3,
    pip3.11, python -m pip, uv pip, by any path."""
    try:
        words = shlex.split(command, comments=True)
    except ValueError:
        return
    for i, word in enumerate(words[1:], 1):
        tool = PurePosixPath(words[i - 1]).name
        if word != "install" or not (tool in ("pip", "pip3") or tool.startswith("pip3.")):
            continue
        index = None
        j = i + 1
        while j < len(words) and words[j] not in ("&&", ";", "||", "|"):
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
                yield w, index
            j += 1


_PIP_OPTIONS_WITH_VALUE = frozenset(
    {"-r", "-c", "-e", "--requirement", "--constraint", "--editable", "-f", "--find-links"}
    | {"--extra-index-url", "--target", "-t", "--prefix", "--root", "--platform"}
)


def _image(reference: str) -> tuple[str, str]:
    """(repository without docker.io, tag) of an image reference; tag "" when absent."""
    name = reference.split("@", 1)[0]
    last = name.rsplit("/", 1)[-1]
    repo, tag = name.rsplit(":", 1) if ":" in last else (name, "")
    for prefix in ("docker.io/", "index.docker.io/", "registry-1.docker.io/"):
        repo = repo.removeprefix(prefix)
    return repo, tag


def read_dockerfile(
    text: str, parse_requirement: Callable[[str], tuple[str, str] | None]
) -> list[Found]:
    """FROM images whose tag documents the torch version, and `pip install` lines in RUN.

    parse_requirement turns a word into (tracked package, requirement text), or None."""
    args: dict[str, str] = {}
    found = []
    for line, instruction, rest in _instructions(text):
        if instruction == "ARG":
            name, eq, default = rest.partition("=")
            if eq:
                args[name.strip()] = default.strip().strip('"')
        elif instruction == "FROM":
            image = next((w for w in rest.split() if not w.startswith("--")), "")
            resolved = _substitute(image, args)
            if resolved is None:
                raise Unreadable(f"line {line}: FROM {image}: a build argument without a default")
            repo, tag = _image(resolved)
            if repo in _TAG_IS_TORCH:
                version = tag.split("-", 1)[0]
                if not version[:1].isdigit():
                    raise Unreadable(
                        f"line {line}: FROM {resolved}: the tag names no torch version"
                    )
                found.append(
                    Found("torch", f"torch=={version}", line, "FROM", "lock", image=resolved)
                )
            elif repo in _TAG_IS_RELEASE:
                raise Unreadable(
                    f"line {line}: FROM {resolved}: cannot tell the torch version from an NGC "
                    "release tag (NVIDIA's PyTorch release notes map it)"
                )
        elif instruction == "RUN":
            command = _substitute(rest, args) or rest
            for word, index in _pip_requirements(command):
                parsed = parse_requirement(word)
                if parsed is not None:
                    package, requirement = parsed
                    found.append(Found(package, requirement, line, "RUN", "manifest", index))
    return found
