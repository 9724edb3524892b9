"""Which index URLs of a torch change may carry the index credential.

A pull request writes its own pin files, so it may name any index, with the team's ${INDEX_TOKEN}
in its userinfo. An index is used only on an approved host: one an index URL of the base side's
pins names (the base branch trusts it already), or one the workflow names (`pins --index-hosts`).
An index URL of either side on another host is handed on without its userinfo, so that the bench
job, which holds the same approved hosts (TORCH_MATRIX_INDEX_HOSTS), refuses the side rather than
install it from the indexes left (suite/execute/indexes.py); a note says so, for the comment. The
host is read from the URL as written (suite/core/index_access.py): a URL whose host part is a
${NAME} cannot be checked, and is refused the same way.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass

from suite.core.index_access import index_host, without_userinfo
from suite.core.secrets import redact_text
from suite.pins.assess import Assessment, Pin


@dataclass(frozen=True)
class SideIndexes:
    """One side's index URLs as the bench job gets them (${NAME} kept where it may be)."""

    index_url: str | None = None
    extra_index_urls: tuple[str, ...] = ()


@dataclass(frozen=True)
class CheckedIndexes:
    hosts: tuple[str, ...]  # the approved hosts, sorted
    sides: Mapping[str, SideIndexes]  # "baseline", "candidate"
    notes: tuple[str, ...]  # one line per index URL that lost its credential or was dropped


def approved_hosts(result: Assessment, named: Collection[str] = ()) -> frozenset[str]:
    """The hosts of the base side's index URLs, and those named (already parsed)."""
    from_base = {host for url in result.base_index_urls if (host := index_host(url))}
    return frozenset(from_base | {h.lower() for h in named})


def _checked(url: str, hosts: frozenset[str], where: str, side: str, notes: list[str]) -> str:
    """The URL as it may travel: as written (a literal credential masked) on an approved host;
    elsewhere without its userinfo, which the bench job refuses, and a note that says so."""
    host = index_host(url)
    if host in hosts:
        return redact_text(url)
    refused = (
        f"not used, so the {side} side is not installed and its cells are untested; approve "
        "the host in the base branch's pin files or the workflow's index-hosts"
    )
    if host is None:
        notes.append(
            f"{where} names an index whose host cannot be checked against the approved index "
            f"hosts ({redact_text(without_userinfo(url))}): {refused}"
        )
    else:
        notes.append(
            f"{where} names index host {host}, which the base branch does not (nor "
            f"index-hosts): {refused}"
        )
    return redact_text(without_userinfo(url))


def _side(pin: Pin | None, side: str, hosts: frozenset[str], notes: list[str]) -> SideIndexes:
    if pin is None:
        return SideIndexes()
    where = f"the {side}'s {pin.included or pin.file}"
    role = "baseline" if side == "base" else "candidate"
    index = _checked(pin.index_url, hosts, where, role, notes) if pin.index_url else None
    extra = (_checked(u, hosts, where, role, notes) for u in pin.extra_index_urls)
    return SideIndexes(index, tuple(extra))


def check_indexes(
    result: Assessment,
    named: Collection[str] = (),
    pins: tuple[Pin | None, Pin | None] | None = None,
) -> CheckedIndexes:
    """Each side's index URLs, each kept, stripped of its credential or dropped; the approved
    hosts; and a note for each URL that was not kept as written. pins: the (baseline,
    candidate) pins to check, when not the result's own (an environment's)."""
    hosts = approved_hosts(result, named)
    notes: list[str] = []
    old, new = pins if pins is not None else (result.baseline_pin, result.candidate_pin)
    sides = {
        "baseline": _side(old, "base", hosts, notes),
        "candidate": _side(new, "head", hosts, notes),
    }
    return CheckedIndexes(tuple(sorted(hosts)), sides, tuple(dict.fromkeys(notes)))
