"""The `torch-matrix image` commands: build the image of one torch pin with this suite inside, for a
docker: side (registered on the group in suite/cli/main.py)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import click

from suite.cli.edge import handles_errors
from suite.cli.options import image_backend_choice
from suite.core.errors import InputError

if TYPE_CHECKING:
    from suite.execute.images import Built

IMAGE_EPILOG = """\b
Exit codes:
  0  built (or found in the layer cache), labelled, pushed when asked, smoke test passed
  2  invalid input: a version, backend, index URL or folder (the message names it)
  3  environment problem: no Docker, the build or the smoke test failed (see the log)
  130  interrupted"""


@click.group()
def image() -> None:
    """Images for docker: sides, one torch pin each, with this suite inside."""


@image.command("build", epilog=IMAGE_EPILOG)
@click.option(
    "--backend",
    required=True,
    type=image_backend_choice(),
    help="Which images/<backend>/Dockerfile.",
)
@click.option("--torch", "torch_version", required=True, metavar="VERSION", help="Exact version.")
@click.option(
    "--torch-from-base",
    is_flag=True,
    help="The --base image already holds this torch (a team's image, pytorch/pytorch): "
    "only the suite is added, and the build fails if the base holds another torch.",
)
@click.option(
    "--base",
    metavar="IMAGE",
    help="Base image (default: the Dockerfile's), pinned as NAME@sha256:DIGEST: a registry's "
    "digest, or a local image's id (docker image inspect --format '{{.Id}}' NAME), which the "
    "local tag NAME must point at. A bare registry tag is pulled and used by its digest; a bare "
    "local tag is refused.",
)
@click.option("--index-url", metavar="URL", help="Where torch comes from; ${VAR} is expanded.")
@click.option(
    "--extra-index-url", "extra_index_urls", multiple=True, metavar="URL", help="Repeatable."
)
@click.option(
    "--with",
    "companions",
    multiple=True,
    metavar="REQ",
    help="A package the pin moves with torch (torchvision==0.24.1); repeatable.",
)
@click.option(
    "--matrix",
    "matrix_file",
    type=click.Path(path_type=Path, dir_okay=False, exists=True),
    help="A matrix file whose `requirements:` (the workloads' own packages) the image holds "
    "too, as --with gives them.",
)
@click.option(
    "--wheel-dir",
    type=click.Path(path_type=Path, file_okay=False, exists=True),
    help="Install everything from these wheels, with no index (offline runners).",
)
@click.option(
    "--registry",
    metavar="REGISTRY",
    help="Push to REGISTRY/<backend>:TAG and run by its digest (e.g. ghcr.io/org/torch-matrix).",
)
@click.option(
    "--context",
    type=click.Path(path_type=Path, file_okay=False, exists=True),
    help="A checkout of torch-matrix holding this very suite (default: the one running).",
)
@click.option(
    "--network", metavar="NAME", help="docker build --network (default: host for a loopback index)."
)
@click.option(
    "--ca-file",
    type=click.Path(path_type=Path, dir_okay=False, exists=True),
    help="A CA bundle for the index, passed as a build secret (never in a layer).",
)
@click.option("--source-url", metavar="URL", help="The repository's URL, for the rebuild line.")
@click.option(
    "--smoke/--no-smoke",
    default=True,
    show_default=True,
    help="Compile, export with AOTInductor and (CUDA) run Triton inside the image.",
)
@click.option(
    "--pull/--no-pull",
    default=True,
    show_default=True,
    help="Pull a base image that is not on this machine.",
)
@click.option(
    "--record",
    type=click.Path(path_type=Path, dir_okay=False),
    help="Write the build record (JSON, torch-matrix/image) here; it must not exist.",
)
@click.option(
    "--log",
    type=click.Path(path_type=Path, dir_okay=False),
    help="Build log (appended; credentials masked). Default: torch-matrix-images/<backend>.log.",
)
@handles_errors
def build(
    backend: str,
    torch_version: str,
    torch_from_base: bool,
    base: str | None,
    index_url: str | None,
    extra_index_urls: Sequence[str],
    companions: Sequence[str],
    matrix_file: Path | None,
    wheel_dir: Path | None,
    registry: str | None,
    context: Path | None,
    network: str | None,
    ca_file: Path | None,
    source_url: str | None,
    smoke: bool,
    pull: bool,
    record: Path | None,
    log: Path | None,
) -> None:
    """Build the image of one torch pin and print the docker: side that runs it, pinned by
    digest. With GITHUB_OUTPUT set, also writes the step outputs side, tag, id and digest."""
    from suite.execute.image_build import BuildOptions, build_image
    from suite.execute.images import Recipe, source_context
    from suite.execute.indexes import Indexes

    if record is not None and record.exists():
        raise InputError("already exists; choose another --record", file=str(record))
    root = context or source_context()
    if root is None:
        raise InputError(
            "this torch-matrix is not a source checkout: pass --context, a checkout of the same "
            "version",
            option="--context",
        )
    recipe = Recipe(
        backend=backend,
        torch=torch_version,
        from_base=torch_from_base,
        base=base,
        indexes=Indexes(index_url or None, tuple(u for u in extra_index_urls if u)),
        companions=_with_matrix(tuple(c for c in companions if c), matrix_file),
        wheel_dir=str(wheel_dir) if wheel_dir else None,
    )
    recipe.indexes.expanded()  # a missing ${VAR} or a masked credential fails before the build
    options = BuildOptions(
        context=root,
        log=log or Path("torch-matrix-images") / f"{backend}.log",
        registry=registry,
        network=network,
        smoke=smoke,
        ca_file=ca_file,
        source_url=source_url,
        pull=pull,
    )
    click.echo(
        f"building the {backend} image of torch {torch_version} (log: {options.log}) …", err=True
    )
    _report(build_image(recipe, options), record)


def _with_matrix(companions: tuple[str, ...], matrix_file: Path | None) -> tuple[str, ...]:
    """--with's packages, then the matrix's `requirements:` not already among them."""
    if matrix_file is None:
        return companions
    from suite.execute.side_deps import matrix_requirements
    from suite.workloads.matrix import load_matrix

    matrix = load_matrix(matrix_file)
    needs = matrix_requirements(matrix.requirements, matrix.file)
    return companions + tuple(r for r in needs if r not in companions)


def _report(built: Built, record: Path | None) -> None:
    """The built image: its record (kept where --record says), the step outputs, the side."""
    from suite.core.results import atomic_write_json
    from suite.core.validation import validate
    from suite.github.outputs import write_github_output

    doc = built.record()
    validate(doc, "torch-matrix/image", file=str(record or "<image record>"))
    if record is not None:
        atomic_write_json(record, doc)
    write_github_output(
        {
            "side": built.side,
            "tag": built.tag,
            "id": built.id,
            "digest": built.repo_digest or built.id,
        }
    )
    click.echo(f"{built.tag} ({built.id}) in {built.took_s:.0f}s", err=True)
    click.echo(built.side)
