"""One tracked requirement (torch, torchvision, torchaudio, triton) as a Pin: the Pin record, PEP
508 parsing that keeps only tracked packages, and pip's URL forms of a requirement (a wheel URL, a
`git+...#egg=torch` line) read as the package they install. Every reader of suite/pins builds its
pins here, so that a pin means the same thing whichever file it came from.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import parse_qs, unquote, urlsplit

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name, canonicalize_version

from suite.pins.formats import Unreadable, tracked

# Only text that starts like a tracked requirement is an error when it does not parse: prose in
# a requirements/README.txt that mentions torch is not.
_TORCH_LINE = re.compile(r"^(?:torch|torchvision|torchaudio|triton)\s*(?:\[|[=<>!~@;]|$)", re.I)
# pip takes a URL, VCS ones included, where a requirement goes.
_URL = re.compile(r"^(?:(?:git|hg|svn|bzr)\+)?[a-z][a-z0-9+.-]*://", re.I)
# A URL that may install a tracked package under a name that cannot be read from it.
_MENTIONS_TRACKED = re.compile(r"torch|triton", re.I)


@dataclass(frozen=True)
class Pin:
    file: str
    line: int  # 1-based, in `included` when set; in pyproject.toml, the requirement's line
    requirement: str  # as packaging normalizes it, markers included
    specifier: str  # "==2.13.0"; "" for a direct URL
    version: str | None  # the exact version of an == or === pin, local label included
    side: str  # what `ab --baseline/--candidate` takes: torch[extras] and specifier or URL
    url: str | None = None
    index_url: str | None = None
    extra_index_urls: tuple[str, ...] = ()
    package: str = "torch"  # or torchvision, torchaudio, triton
    kind: str = "manifest"  # "lock": one resolved version, which wins over a manifest's range
    image: str | None = None  # the pin is this image (a Dockerfile's FROM pytorch/pytorch:...)
    # The file the pin is written in when pip reaches it through `file`'s -r/-c include.
    included: str | None = None
    # The part of its file the pin belongs to (a Dockerfile's stage, a workflow's job), where a
    # file holds several environments (suite/pins/environments.py); None: the file is one.
    part: str | None = None

    @property
    def exact(self) -> bool:
        return self.version is not None or self.url is not None

    @property
    def key(self) -> str:
        """Equal for pins of the same torch: ==2.13 is ==2.13.0, and extras change no torch."""
        if self.url:
            return f"@ {self.url}"
        if self.version is not None and not self.specifier.startswith("==="):
            return f"=={canonicalize_version(self.version)}"
        return self.specifier

    @property
    def location(self) -> str:
        """Where the pin is written: `requirements.txt:2`, `deps/base.txt:3 (included by
        requirements.txt)`."""
        if self.included:
            return f"{self.included}:{self.line} (included by {self.file})"
        return f"{self.file}:{self.line}"


def make_pin(
    file: str,
    line: int,
    req: Requirement,
    index_url: str | None,
    extra: tuple[str, ...] = (),
    kind: str = "manifest",
    image: str | None = None,
    part: str | None = None,
) -> Pin | None:
    """The pin a tracked requirement makes; None for a bare name, which takes whatever is there."""
    specs = list(req.specifier)
    if not specs and not req.url:
        return None
    exact = len(specs) == 1 and specs[0].operator in ("==", "===") and "*" not in specs[0].version
    extras = f"[{','.join(sorted(req.extras))}]" if req.extras else ""
    package = tracked(req.name) or canonicalize_name(req.name)
    return Pin(
        file=file,
        line=line,
        requirement=str(req),
        specifier=str(req.specifier),
        version=specs[0].version if exact else None,
        side=f"{package}{extras} @ {req.url}" if req.url else f"{package}{extras}{req.specifier}",
        url=req.url,
        index_url=index_url,
        extra_index_urls=extra,
        package=package,
        kind=kind,
        image=image,
        part=part,
    )


def parse_tracked(text: str, where: str) -> Requirement | None:
    """The requirement of a tracked package, in PEP 508 or pip's bare-URL form; None for any
    other package. Raises Unreadable for text that starts like a tracked requirement and does
    not parse, and for a URL that may install one under a name it does not say."""
    try:
        req = Requirement(text)
    except InvalidRequirement as exc:
        if _TORCH_LINE.match(text):
            raise Unreadable(f"{where}: requirement does not parse: {exc}") from None
        return url_requirement(text, where)
    return req if tracked(req.name) == canonicalize_name(req.name) else None


def _named_by_url(url: str) -> str | None:
    """The package a pip URL installs: its #egg= name, else the name of the wheel or sdist."""
    parts = urlsplit(url)
    egg = parse_qs(parts.fragment).get("egg")
    if egg:
        return egg[0].split("[", 1)[0]
    file = unquote(parts.path.rsplit("/", 1)[-1])
    if file.endswith(".whl") and file.count("-") >= 4:
        return file.split("-", 1)[0]
    for suffix in (".tar.gz", ".zip"):
        if file.endswith(suffix) and "-" in file:
            return file.removesuffix(suffix).rsplit("-", 1)[0]
    return None


def _may_be_tracked(url: str) -> bool:
    """Whether a URL that names no package may install a tracked one: its repository or file
    mentions one (pytorch/pytorch.git, triton.git), or it is PyTorch's vision or audio. An
    organization's name alone (github.com/pytorch-labs/other.git) says nothing of the package."""
    path = [part for part in urlsplit(url.split("+", 1)[-1]).path.split("/") if part]
    if not path:
        return bool(_MENTIONS_TRACKED.search(url))
    repo = path[-1].split("@", 1)[0].removesuffix(".git")
    owner = path[-2].lower() if len(path) > 1 else ""
    return bool(_MENTIONS_TRACKED.search(repo)) or (
        owner == "pytorch" and repo in ("vision", "audio")
    )


def url_requirement(text: str, where: str) -> Requirement | None:
    """A requirement written as a bare URL (`https://.../torch-2.13.0-...whl`,
    `git+https://github.com/pytorch/pytorch@v2.13.0#egg=torch`) as `name @ URL`, when it names
    a tracked package; None for any other text."""
    if not _URL.match(text):
        return None
    name = _named_by_url(text)
    if name is None:
        if _may_be_tracked(text):
            raise Unreadable(
                f"{where}: {text!r} installs from a URL that names no package "
                "(write `torch @ URL` or add #egg=torch)"
            )
        return None
    if tracked(name) != canonicalize_name(name):
        return None
    try:
        return Requirement(f"{name} @ {text}")
    except InvalidRequirement as exc:
        raise Unreadable(f"{where}: {text!r} is not a URL pip can install: {exc}") from None
