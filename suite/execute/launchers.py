"""The node launchers' registry, one entry per kind, and how a run chooses one: the matrix's
`launcher:`, or `--launcher KIND|FILE|JSON` over it (suite/execute/nodes.py has the kinds)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from suite.core.errors import InputError
from suite.core.spec import CellSpec
from suite.execute.kube import KubernetesLauncher
from suite.execute.nodes import LocalLauncher, NodeLauncher, SshLauncher
from suite.execute.slurm import SlurmLauncher

if TYPE_CHECKING:
    from suite.workloads.matrix import Matrix


def launchers() -> dict[str, type[NodeLauncher]]:
    """The registry: one entry per kind."""
    return {
        "local": LocalLauncher,
        "ssh": SshLauncher,
        "slurm": SlurmLauncher,
        "kubernetes": KubernetesLauncher,
    }


def node_launcher(settings: Mapping[str, Any] | None, where: dict[str, str]) -> NodeLauncher:
    """The launcher SETTINGS name (None: local, every node on this host)."""
    settings = dict(settings or {"kind": "local"})
    kind = str(settings.get("kind", ""))
    known = launchers()
    if kind not in known:
        raise InputError(f"unknown launcher {kind!r}; expected one of {', '.join(known)}", **where)
    return known[kind](settings, where)


def launcher_option(value: str | None) -> tuple[dict[str, Any] | None, dict[str, str]]:
    """--launcher: a bare kind, a YAML file holding the launcher mapping, or the mapping as
    JSON (null or empty: none, as the reusable workflow says for a backend that names none)."""
    if value is None or value.strip() in ("", "null"):
        return None, {}
    if value in launchers():
        return {"kind": value}, {"option": "--launcher"}
    import json

    import jsonschema

    from suite.core.errors import SchemaErrors
    from suite.core.validation import json_path, load_spec_document, schema

    where: dict[str, str] = {"option": "--launcher"}
    if value.lstrip().startswith("{"):
        try:
            doc = json.loads(value)
        except ValueError as exc:
            raise InputError(f"the launcher is not JSON: {exc}", **where) from None
    elif Path(value).is_file():
        doc, _ = load_spec_document(Path(value))
        where = {"file": value}
    else:
        raise InputError(
            f"{value!r} is neither a launcher kind ({', '.join(launchers())}), a file, nor "
            "a JSON mapping",
            **where,
        )
    launcher = schema("matrix.schema.json")["$defs"]["launcher"]
    errors = list(jsonschema.Draft202012Validator(launcher).iter_errors(doc))
    if errors:
        problems = [(json_path(e.absolute_path), e.message) for e in errors]
        raise SchemaErrors(problems, file=where.get("file", "--launcher"))
    return dict(doc), where


def choose_launcher(matrix: Matrix, cells: Sequence[CellSpec], option: str | None) -> None:
    """--launcher over the matrix's `launcher:`; a launcher that cannot place the cells' nodes
    is an input error now, before anything runs."""
    settings, where = launcher_option(option)
    if settings is not None:
        matrix.launcher, matrix.launcher_where = settings, where
    if matrix.launcher is None:
        return
    chosen = node_launcher(matrix.launcher, matrix.launcher_where)
    for cell in cells:
        if cell.nodes > 1:
            chosen.check_nodes(cell.nodes)
