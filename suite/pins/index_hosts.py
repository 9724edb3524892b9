"""Which index URLs of a torch change may carry the index credential.

A pull request writes its own pin files, so it may name any index, with the team's ${INDEX_TOKEN}
in its userinfo. A credential goes only to an approved host: one an index URL of the base side's
pins names (the base branch trusts it already), or one the workflow names (`pins --index-hosts`).
An index URL of either side on another host keeps no userinfo and no ${NAME}: it is handed on
without them, or not at all when a ${NAME} stays in it, and a note says which. The host is read
from the URL as written (suite/core/index_access.py): a URL whose host part is a ${NAME} cannot
be checked and is not handed on.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass

from suite.core.index_access import REFERENCE, index_host, without_userinfo
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


def _checked(url: str, hosts: frozenset[str], where: str, notes: list[str]) -> str | None:
    """The URL as it may travel: as written (a literal credential masked) on an approved host
    or where it holds no credential; else without its userinfo, or None."""
    host = index_host(url)
    bare = without_userinfo(url)
    if host in hosts or (bare == url and not REFERENCE.search(url)):
        return redact_text(url)
    if host is None:
        notes.append(
            f"{where} names an index whose host cannot be checked against the approved index "
            f"hosts ({redact_text(url)}): not used; write the host itself, or name it in "
            "index-hosts"
        )
        return None
    unapproved = f"{where} names index host {host}, which the base branch does not (nor "
    if REFERENCE.search(bare):
        notes.append(f"{unapproved}index-hosts), with a ${{NAME}} in its URL: not used")
        return None
    notes.append(f"{unapproved}index-hosts): used with no credential")
    return bare


def _side(pin: Pin | None, side: str, hosts: frozenset[str], notes: list[str]) -> SideIndexes:
    if pin is None:
        return SideIndexes()
    where = f"the {side}'s {pin.included or pin.file}"
    index = _checked(pin.index_url, hosts, where, notes) if pin.index_url else None
    extra = (_checked(u, hosts, where, notes) for u in pin.extra_index_urls)
    return SideIndexes(index, tuple(u for u in extra if u is not None))


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
