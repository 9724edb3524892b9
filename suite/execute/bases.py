"""The base image an image is built on, pinned by its digest, never trusted by a local tag alone.

On a runner that keeps its Docker images from job to job, any earlier job can `docker tag` an
image of its own over the name a later job builds its baseline on. So a base is given as
NAME@sha256:DIGEST, DIGEST being a registry's repo digest or, for an image that was never pushed
(the offline Debian base of images/base/build-offline-base.sh), its local image id; then the
local tag NAME must point at that very id. A bare tag is taken from the registry (pulled, then
used by the repo digest the registry gives it); a bare tag that only this machine knows is
refused, with how to pin it.

BuildKit finds a local base only by its tag (NAME@IMAGE-ID sends it to a registry), and the tag
could move between the check and the build: check_built_on then holds the built image to begin
with the base's layers.
"""

from __future__ import annotations

import re
from typing import Any

from suite.core.errors import EnvironmentProblem, InputError
from suite.core.secrets import redact_text
from suite.execute.images import PUSH_TIMEOUT_S, Base, docker_command, inspect_image

OPTION = "--base"
_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
PIN_HOW = "docker image inspect --format '{{.Id}}' NAME"


def _parts(reference: str) -> tuple[str, str, str | None]:
    """NAME (with its tag, if any), the repository (NAME without its tag) and the digest."""
    name, _, digest = reference.partition("@")
    repo = name.rsplit(":", 1)[0] if ":" in name.rsplit("/", 1)[-1] else name
    return name, repo, digest or None


def _repo_digest(doc: dict[str, Any], repo: str) -> str | None:
    """The registry's digest of this image under this repository, if it came from one."""
    for repo_digest in doc.get("RepoDigests") or []:
        where, _, digest = str(repo_digest).partition("@")
        if where in (repo, f"docker.io/{repo}", f"docker.io/library/{repo}"):
            return digest
    return None


def _layers(doc: dict[str, Any]) -> tuple[str, ...]:
    return tuple((doc.get("RootFS") or {}).get("Layers") or ())


def _pull(reference: str) -> str | None:
    """None once pulled, else why not."""
    proc = docker_command(["pull", reference], timeout=PUSH_TIMEOUT_S)
    return None if proc.returncode == 0 else redact_text(proc.stderr.strip())[-500:]


def resolve_base(reference: str, *, pull: bool = True) -> Base:
    """The base a reference names, pinned by a digest that was checked on this machine:
    NAME@sha256:DIGEST by the registry's digest, or by the local image NAME points at when
    DIGEST is its id; a bare NAME by the repo digest the registry gives it (pulled, unless
    pull is False: then the local image's own repo digest). InputError naming --base for a
    tag that points at another image, or a bare tag this machine made."""
    name, repo, digest = _parts(reference)
    if digest is None:
        return _by_tag(name, repo, pull)
    if not _DIGEST.fullmatch(digest):
        raise InputError(
            f"{reference!r}: the digest after @ must be sha256: and 64 hex digits", option=OPTION
        )
    return _by_digest(name, repo, digest, pull)


def _registry_base(repo: str, digest: str) -> Base | None:
    doc = inspect_image(f"{repo}@{digest}")
    if doc is None or _repo_digest(doc, repo) != digest:
        return None
    return Base(f"{repo}@{digest}", digest, "repo-digest", _layers(doc))


def _by_digest(name: str, repo: str, digest: str, pull: bool) -> Base:
    found = _registry_base(repo, digest)
    if found is not None:
        return found
    # A local image pinned by its id needs a tag for FROM: NAME:TAG@sha256:ID.
    local = inspect_image(name) if name != repo else None
    if local is not None and local.get("Id") == digest:
        return Base(name, digest, "image-id", _layers(local))
    why = _pull(f"{repo}@{digest}") if pull else "--no-pull"
    found = None if why else _registry_base(repo, digest)
    if found is not None:
        return found
    if local is not None:
        raise InputError(
            f"the local tag {name} points at {local.get('Id')}, not {digest}: refused (an "
            "image tagged over it since it was pinned is not the base asked for; pin the image "
            f"you mean by its id: {PIN_HOW.replace('NAME', name)})",
            option=OPTION,
        )
    raise EnvironmentProblem(
        f"base image {name}@{digest} is not on this machine and could not be pulled ({why}); "
        "a local image is pinned by its tag and id, NAME:TAG@sha256:ID"
    )


def _by_tag(name: str, repo: str, pull: bool) -> Base:
    local = inspect_image(name)
    if local is not None and _repo_digest(local, repo) is None:
        raise InputError(
            f"{name} is a local tag with no registry digest (made on this machine by docker "
            "tag, import or build), and a local tag can be moved to another image by any job "
            f"before this one: refused; pin it as {name}@sha256:ID, ID from "
            f"`{PIN_HOW.replace('NAME', name)}`, or pin a registry image by its digest",
            option=OPTION,
        )
    if pull:  # what the registry's tag means now, not what an earlier job left here
        why = _pull(name)
        if why is not None:
            raise EnvironmentProblem(
                f"base image {name} could not be pulled ({why}); pin it by digest "
                f"({repo}@sha256:…), or pass --no-pull to use this machine's copy"
            )
        local = inspect_image(name)
    if local is None:
        raise EnvironmentProblem(f"base image {name!r} is not on this machine (--no-pull)")
    digest = _repo_digest(local, repo)
    if digest is None:  # pulled, yet no digest of this repository: not the registry's image
        raise EnvironmentProblem(f"docker reports no registry digest of {repo} for {name}")
    return Base(f"{repo}@{digest}", digest, "repo-digest", _layers(local))


def check_built_on(image: str, shown: str, base: Base) -> None:
    """The built image (by id) begins with the base's layers: its FROM found the image that was
    checked, not one that a tag was moved to in between."""
    doc = inspect_image(image)
    layers = _layers(doc) if doc is not None else ()
    if layers[: len(base.layers)] != base.layers:
        raise EnvironmentProblem(
            f"the built image {shown} ({image}) is not built on the base {base.reference} "
            f"({base.digest}): its layers do not begin with the base's (was the base's tag moved "
            "during the build?); build again, with the base pinned by digest"
        )
