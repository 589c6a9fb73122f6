"""What the server must be told: the wanted names against the zone as it is. Pure.

The rules are external-dns's with its TXT registry:

- a wanted name nobody holds is created, with the fleet's TXT record beside it;
- a name whose TXT names this fleet is the fleet's: changed when its addresses differ,
  deleted under ``sync`` when no longer wanted (never under ``upsert-only``);
- a name that holds anything else (no registry TXT, or another fleet's) is never
  changed or deleted: it is a conflict, reported.

Each change carries what the server had (``before``): the adapter turns it into the
UPDATE's prerequisites, so a name edited since the zone was read fails the whole update
instead of being overwritten.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from reconciler.core.endpoints.records import Endpoint, Member, record_set, registry_owner
from reconciler.model.settings import DnsPolicy


@dataclass(frozen=True, slots=True)
class Present:
    """One name as the server has it, relative to the zone; values sorted."""

    name: str
    a: tuple[str, ...] = ()
    aaaa: tuple[str, ...] = ()
    txt: tuple[str, ...] = ()
    other: tuple[str, ...] = ()
    """The types of its other record sets (CNAME, MX, ...)."""

    @property
    def owner(self) -> str | None:
        return registry_owner(self.txt)


class Op(StrEnum):
    CREATE = "create"
    UPDATE = "update"
    DELETE = "delete"


@dataclass(frozen=True, slots=True)
class Change:
    op: Op
    name: str
    before: Present | None = None
    """What the server had (None: nothing, the name must not exist)."""
    after: Endpoint | None = None
    """What it gets (None: a delete)."""


@dataclass(frozen=True, slots=True)
class Changes:
    changes: tuple[Change, ...] = ()
    conflicts: tuple[str, ...] = ()
    """One sentence per wanted name someone else holds."""
    owned: int = 0
    """Names the fleet owns once the changes are made."""


def published(present: Sequence[Present], *, fleet: str) -> dict[str, tuple[str, ...]]:
    """The addresses of the names ``fleet`` owns: ``records.record_set``'s memory."""
    return {p.name: (*p.a, *p.aaaa) for p in present if p.owner == fleet}


def decide(
    members: Sequence[Member], present: Sequence[Present], *, fleet: str, policy: DnsPolicy
) -> Changes:
    """The whole decision of a run: the names ``members`` imply (``present`` remembering
    what a proxy that is not healthy keeps), against ``present``."""
    wanted = record_set(members, published=published(present, fleet=fleet))
    return diff(wanted, present, fleet=fleet, policy=policy)


def diff(
    wanted: Sequence[Endpoint], present: Sequence[Present], *, fleet: str, policy: DnsPolicy
) -> Changes:
    """The changes that make the fleet's names what ``wanted`` says, names sorted."""
    by_name = {p.name: p for p in present}
    wanted_names = {e.name for e in wanted}
    changes: list[Change] = []
    conflicts: list[str] = []
    owned = 0
    for endpoint in wanted:
        now = by_name.get(endpoint.name)
        if now is None:
            changes.append(Change(Op.CREATE, endpoint.name, after=endpoint))
            owned += 1
        elif now.owner != fleet:
            conflicts.append(_conflict(now))
        else:
            owned += 1
            if set(now.a) != set(endpoint.ipv4) or set(now.aaaa) != set(endpoint.ipv6):
                changes.append(Change(Op.UPDATE, endpoint.name, before=now, after=endpoint))
    for now in present:
        if now.owner != fleet or now.name in wanted_names:
            continue
        if policy is DnsPolicy.SYNC:
            changes.append(Change(Op.DELETE, now.name, before=now))
        else:
            owned += 1
    return Changes(
        changes=tuple(sorted(changes, key=lambda c: c.name)),
        conflicts=tuple(conflicts),
        owned=owned,
    )


def _conflict(now: Present) -> str:
    owner = now.owner
    if owner is not None:
        return f"{now.name} belongs to fleet {owner} (its TXT registry record); left alone"
    kinds = [k for k, v in (("A", now.a), ("AAAA", now.aaaa), ("TXT", now.txt)) if v]
    held = ", ".join([*kinds, *now.other])
    return f"{now.name} holds {held} records without this fleet's TXT registry record; left alone"
