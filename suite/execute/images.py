"""Images for docker: sides: one pin's torch (or a team's base image that already holds torch) with
this very suite, built from images/<backend>/Dockerfile by `docker build` (BuildKit).

A Recipe is everything that decides what goes into an image: the backend's Dockerfile, the torch
version, the index and extra indexes it comes from (or a wheel folder), the companions the pin
moves with it, and the base image, pinned by its digest (suite/execute/bases.py). Its key
names the image (torch-matrix/cpu:torch-2.14.1-KEY); Docker's layer cache makes a rebuild of an
unchanged recipe cost seconds, so an unchanged baseline is never built twice.

The suite inside an image must be the suite that drives it: the image carries the digest of its
suite's source as the label dev.torch-matrix.suite, and a docker: side whose label differs from
the running suite is refused (suite/execute/docker.py). The recipe, credential-free, is the label
dev.torch-matrix.recipe: what the `docker build` line of a reproduction is made from.

Credentials never reach a layer, a label, a tag, a log or a record: an index URL with
user:token@ goes to the build as the BuildKit secret pip-index, and everywhere else as its
credential-free or masked form.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from suite.core.backends import backend_entry, backend_names, image_backends
from suite.core.errors import EnvironmentProblem, InputError
from suite.execute.indexes import Indexes
from suite.execute.manifest import file_digest


def dockerfile_of(name: str) -> str:
    """The Dockerfile of a backend that has an image (its registry entry's folder)."""
    dockerfile = backend_entry(name).dockerfile
    if dockerfile is None:
        raise InputError(f"backend {name!r} has no image", option="--backend")
    return dockerfile


LABEL_SUITE = "dev.torch-matrix.suite"
LABEL_RECIPE = "dev.torch-matrix.recipe"
LABEL_BASE_DIGEST = "org.opencontainers.image.base.digest"
LABEL_REVISION = "org.opencontainers.image.revision"
LABEL_SOURCE = "org.opencontainers.image.source"
DEFAULT_REPOSITORY = "torch-matrix"
BUILD_TIMEOUT_S = 3 * 3600.0
PUSH_TIMEOUT_S = 3600.0
SMOKE_TIMEOUT_S = 900.0
INSPECT_TIMEOUT_S = 60.0
# Where a wheel folder outside the build context is linked in for the build, then removed.
WHEEL_LINKS = ".whl/build"
WHEEL_REBUILD_DIR = ".whl/torch"  # where a rebuild line expects a wheel folder's wheels
_TAG_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")
_DEFAULT_BASE = re.compile(r"^ARG BASE_IMAGE=(\S+)\s*$", re.MULTILINE)


# --- the suite's identity -------------------------------------------------------------------


def _schema_dir(package: Path) -> Path:
    """schemas/ of an installed suite (suite/schemas) or of a source checkout (beside suite/)."""
    inside = package / "schemas"
    return inside if inside.is_dir() else package.parent / "schemas"


def suite_digest(package: Path | None = None) -> str:
    """sha256 over the suite's Python files, data files and schemas, by relative path: the same
    for a source checkout and for the installed package that pip made from it."""
    if package is None:
        import suite

        package = Path(suite.__file__).resolve().parent
    files: list[tuple[str, Path]] = []
    for path in package.rglob("*"):
        rel = path.relative_to(package)
        if "__pycache__" in rel.parts or rel.parts[0] == "schemas" or not path.is_file():
            continue
        if path.suffix == ".py" or (rel.parts[0] == "data" and path.suffix in (".yaml", ".json")):
            files.append((f"suite/{rel.as_posix()}", path))
    files += [(f"schemas/{p.name}", p) for p in _schema_dir(package).glob("*.json")]
    digest = hashlib.sha256()
    for name, path in sorted(files):
        digest.update(name.encode() + b"\0" + hashlib.sha256(path.read_bytes()).digest())
    return "sha256:" + digest.hexdigest()


def source_context() -> Path | None:
    """The checkout the running suite comes from, when it is one (it holds images/)."""
    import suite

    root = Path(suite.__file__).resolve().parent.parent
    return root if (root / "images").is_dir() and (root / "pyproject.toml").is_file() else None


# --- recipes --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Recipe:
    backend: str
    torch: str  # the exact version, 2.14.1 or 2.14.1+cu128
    from_base: bool = False  # the base image already holds this torch
    base: str | None = None  # None: the Dockerfile's default
    indexes: Indexes = field(default_factory=Indexes)
    companions: tuple[str, ...] = ()  # torchvision==0.24.1, triton==3.5.1
    wheel_dir: str | None = None  # a folder of wheels: then nothing comes from an index

    def __post_init__(self) -> None:
        if self.backend not in image_backends():
            native = [b for b in backend_names() if b not in image_backends()]
            raise InputError(
                f"no image for backend {self.backend!r}; images exist for "
                f"{', '.join(image_backends())} ({', '.join(native)} run natively)",
                option="--backend",
            )
        if not re.fullmatch(r"[0-9][0-9A-Za-z.+!_-]*", self.torch):
            raise InputError(
                f"torch must be an exact version such as 2.14.1, got {self.torch!r}",
                option="--torch",
            )
        if self.from_base and self.base is None:
            raise InputError("--torch-from-base needs --base, the image that holds torch")

    @property
    def dockerfile(self) -> str:
        return dockerfile_of(self.backend)

    def public(self) -> dict[str, Any]:
        """The recipe with every credential removed: for labels, records, keys and logs."""
        return {
            "backend": self.backend,
            "dockerfile": self.dockerfile,
            "torch": self.torch,
            "from_base": self.from_base,
            "base": self.base,
            **self.indexes.public(),
            "companions": list(self.companions),
            "wheel_dir": self.wheel_dir,
            "credentials": self.indexes.needs_secret(),
        }

    def secret_lines(self) -> str:
        """The pip-index secret: the index variables with their credentials, for `set -a; .`."""
        pairs = self.indexes.pip_env().items()
        return "".join(f"{name}={shlex.quote(value)}\n" for name, value in pairs)

    def build_args(self, wheel_dir: str | None = None) -> dict[str, str]:
        """The Dockerfile's arguments that choose the torch (never a credential); wheel_dir is
        the wheel folder's path inside the build context."""
        public = self.public()
        args = {
            "TORCH_VERSION": self.torch,
            "TORCH_FROM_BASE": "1" if self.from_base else "0",
            "TORCH_COMPANIONS": " ".join(self.companions),
        }
        if self.base:
            args["BASE_IMAGE"] = self.base
        if public["index_url"]:
            args["TORCH_INDEX_URL"] = public["index_url"]
        if public["extra_index_urls"]:
            args["TORCH_EXTRA_INDEX_URLS"] = " ".join(public["extra_index_urls"])
        if wheel_dir or self.wheel_dir:
            args["TORCH_WHEEL_DIR"] = wheel_dir or str(self.wheel_dir)
        return args


def recipe_key(
    recipe: Recipe, suite: str, base_digest: str | None, wheels: str | None, dockerfile: str
) -> str:
    """What names the image: the credential-free recipe, the suite, the base's digest, the
    wheels' names and contents and the Dockerfile's text. Changing only the index changes it;
    changing only a token does not."""
    # The wheels count, not their folder's name; the index, not whether it took a credential.
    public = {**recipe.public(), "wheel_dir": None, "credentials": None}
    text = hashlib.sha256(dockerfile.encode()).hexdigest()
    blob = json.dumps([public, suite, base_digest, wheels, text], sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()


def image_tag(recipe: Recipe, key: str, repository: str = DEFAULT_REPOSITORY) -> str:
    what = "base" if recipe.from_base else "torch"
    version = _TAG_UNSAFE.sub("-", recipe.torch)
    return f"{repository.rstrip('/')}/{recipe.backend}:{what}-{version}-{key[:12]}"


def wheel_listing(folder: Path) -> str:
    """The key of a wheel folder: each wheel's name and the sha256 of its bytes. Names and sizes
    alone would let a wheel replaced by another of the same size (an earlier job's, on a runner
    that keeps its folders) reuse the image built from the first."""
    wheels = sorted(folder.glob("*.whl"))
    if not wheels:
        raise InputError("holds no wheels (*.whl)", file=str(folder), option="--wheel-dir")
    return hashlib.sha256(
        "\n".join(f"{w.name} {file_digest(w)}" for w in wheels).encode()
    ).hexdigest()


@dataclass(frozen=True)
class Base:
    """A base image pinned by its digest (suite/execute/bases.py resolves one)."""

    reference: str  # what FROM names: name@sha256:repo-digest, or the tag of a local image
    digest: str  # the repo digest's sha256, or the image id of a base that was never pushed
    digest_kind: str  # "repo-digest" or "image-id"
    layers: tuple[str, ...] = ()  # its layers, with which the built image must begin


# --- docker ---------------------------------------------------------------------------------


def build_cli() -> list[str]:
    """A docker client that runs BuildKit builds: one with buildx, else Debian's docker.io 20.10
    client, whose built-in BuildKit needs no plugin. TORCH_MATRIX_DOCKER names another."""
    chosen = os.environ.get("TORCH_MATRIX_DOCKER")
    return [chosen] if chosen else _default_cli()


@functools.cache
def _default_cli() -> list[str]:
    docker = shutil.which("docker")
    if docker is None:
        raise EnvironmentProblem("docker is not installed (images/README.md says what is needed)")
    probe = subprocess.run(
        [docker, "buildx", "version"], capture_output=True, timeout=INSPECT_TIMEOUT_S, check=False
    )
    if probe.returncode != 0 and Path("/usr/bin/docker").is_file():
        return ["/usr/bin/docker"]
    return [docker]


def docker_command(
    args: Sequence[str], timeout: float = INSPECT_TIMEOUT_S
) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(
            [*build_cli(), *args], capture_output=True, text=True, timeout=timeout, check=False
        )
    except FileNotFoundError:
        raise EnvironmentProblem("docker is not installed") from None
    except subprocess.TimeoutExpired:
        raise EnvironmentProblem(f"docker {args[0]} timed out after {timeout:.0f}s") from None


def inspect_image(reference: str) -> dict[str, Any] | None:
    proc = docker_command(["image", "inspect", reference])
    if proc.returncode != 0:
        return None
    found: dict[str, Any] = json.loads(proc.stdout)[0]
    return found


def default_base(context: Path, backend: str) -> str:
    text = (context / dockerfile_of(backend)).read_text("utf-8")
    found = _DEFAULT_BASE.search(text)
    if found is None:
        raise EnvironmentProblem(f"{dockerfile_of(backend)} names no default BASE_IMAGE")
    return found[1]


@dataclass(frozen=True)
class Built:
    """An image built for a side: what to run it as, and how it was made."""

    tag: str
    id: str  # sha256:… of the image's config: its digest on this machine
    repo_digest: str | None  # registry/name@sha256:… once pushed
    recipe: Recipe
    base: Base
    suite: str
    key: str
    revision: str | None
    source: str | None
    took_s: float
    smoke: dict[str, Any] | None = None
    log: str | None = None

    @property
    def side(self) -> str:
        """The docker: side that runs it, pinned by digest: the registry's, else the tag with the
        image id (suite/execute/docker.py resolves that on the machine that built it)."""
        pinned = self.repo_digest or f"{self.tag.rsplit(':', 1)[0]}@{self.id}"
        return f"docker:{pinned}"

    def record(self) -> dict[str, Any]:
        return {
            "kind": "torch-matrix/image",
            "schema_version": 1,
            "side": self.side,
            "tag": self.tag,
            "id": self.id,
            "repo_digest": self.repo_digest,
            "recipe": self.recipe.public(),
            "base": {
                "reference": self.base.reference,
                "digest": self.base.digest,
                "digest_kind": self.base.digest_kind,
            },
            "suite": self.suite,
            "key": self.key,
            "revision": self.revision,
            "source": self.source,
            "build_s": round(self.took_s, 3),
            "rebuild": rebuild_line(
                self.recipe.public(), self.base.reference, self.revision, self.source, self.tag
            ),
            "smoke": self.smoke,
            "log": self.log,
        }


def rebuild_command(
    recipe: Mapping[str, Any], base: str | None, revision: str | None, source: str | None, tag: str
) -> tuple[list[str], list[str]]:
    """The `docker build` argv that makes the image again from its recipe (the Dockerfile at the
    suite's commit, the same arguments, the base by digest), from the repository's URL at that
    commit when both are known, else from a checkout of it; and the notes a reader needs (which
    checkout, which wheels, which secret)."""
    args = ["docker", "build", "-f", str(recipe["dockerfile"])]
    values = {
        "BASE_IMAGE": base,
        "TORCH_VERSION": recipe.get("torch"),
        "TORCH_FROM_BASE": "1" if recipe.get("from_base") else None,
        "TORCH_INDEX_URL": recipe.get("index_url"),
        "TORCH_EXTRA_INDEX_URLS": " ".join(recipe.get("extra_index_urls") or []) or None,
        "TORCH_COMPANIONS": " ".join(recipe.get("companions") or []) or None,
        "TORCH_WHEEL_DIR": WHEEL_REBUILD_DIR if recipe.get("wheel_dir") else None,
    }
    for name, value in values.items():
        if value:
            args += ["--build-arg", f"{name}={value}"]
    if recipe.get("credentials"):
        args += ["--secret", "id=pip-index,src=PIP_INDEX_FILE"]
    args += ["-t", tag]
    from_url = bool(source and source.startswith("https://") and revision not in (None, "unknown"))
    args.append(f"{source}.git#{revision}" if from_url else ".")
    notes = []
    if not from_url:
        notes.append(f"from a checkout of torch-matrix at {revision or 'an unknown commit'}")
    if recipe.get("credentials"):
        notes.append("PIP_INDEX_FILE holds PIP_INDEX_URL=... with the index's credential")
    if recipe.get("wheel_dir"):
        notes.append(f"{WHEEL_REBUILD_DIR} must hold the wheels that were in {recipe['wheel_dir']}")
    return args, notes


def rebuild_line(
    recipe: Mapping[str, Any], base: str | None, revision: str | None, source: str | None, tag: str
) -> str:
    """rebuild_command as one line, its notes in a trailing comment."""
    argv, notes = rebuild_command(recipe, base, revision, source, tag)
    line = "DOCKER_BUILDKIT=1 " + shlex.join(argv)
    return line + (f"  # {'; '.join(notes)}" if notes else "")
