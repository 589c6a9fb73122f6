"""Base images a host no longer needs: which to remove, decided from names and records alone.

Bases are named by content (``base-<key>-<sha256[:12]>.<format>``), so an image
update uploads a new base beside the old one and the VMs on the old one are
replaced; the old base must then go, or every monthly update would leave a
few hundred MB behind on every host. Pure: the planner calls ``unused_bases``
with what it observed.

A base volume in the pool of a reachable host of fleet.yaml (content-named, or
``base-<key>.<format>`` as laid out before content names) is removed, with its
marker, when all of these hold:

- no image of fleet.yaml needs that name (``spec.images``, and the direct
  ``https://`` images the proxies name), and no create or replace of this
  plan builds on it;
- no VM of this fleet observed on that host records it: a VM records its
  base (``Owner.image_base``); one created before content names records none,
  and its base is ``base-<image_key>.<format>``; one that records no image at
  all holds every base of its host;
- no other fleet's VM was seen on the host: base names carry no fleet id, so
  a shared pool's bases may be another fleet's;
- no create or replace of this plan goes to the host: its uploads (base,
  marker, seed ISO) keep libvirt from refreshing the pool, which the host's
  last check needs, so the removal waits for a run without new VMs there.

A marker whose base is gone counts as that base. Unreachable hosts and hosts
missing from fleet.yaml get nothing. The host re-checks, right before it
deletes, that no domain at all (foreign ones too, backing chains included)
uses the base, and keeps it without an error when one does: a foreign VM on
our base is invisible here.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from typing import Protocol

from reconciler.core.naming import resolve_image
from reconciler.model import Owner, Repo
from reconciler.model.plan import Action, Create, RemoveBase, Replace
from reconciler.model.vm import (
    MARKER_SUFFIX,
    base_marker_name,
    base_volume_name,
    is_base_volume,
    legacy_base_names,
)


class Recorded(Protocol):
    """An observed VM of this fleet, as the planner holds it."""

    @property
    def owner(self) -> Owner: ...


def unused_bases(
    repo: Repo,
    volumes: Mapping[str, tuple[str, ...]],
    vms: Mapping[tuple[str, str], Recorded],
    fleets: Mapping[str, Collection[str]],
    actions: Iterable[Action],
) -> list[RemoveBase]:
    """A ``RemoveBase`` (``volumes`` the base then its marker, those present) per unused base.

    ``volumes``: the pool of each reachable host of fleet.yaml; ``vms``: this
    fleet's VMs there by (host, domain); ``fleets``: other fleets seen per
    host; ``actions``: the plan so far. Ordered by host, then base name.
    """
    actions = list(actions)
    needed = _needed(repo, actions)
    busy = {a.host for a in actions if isinstance(a, Create | Replace)}
    held: dict[str, set[str] | None] = {}  # host -> bases its VMs record; None: all of them
    for (host, _), vm in vms.items():
        names = held.setdefault(host, set())
        recorded = _recorded(vm.owner)
        held[host] = None if names is None or recorded is None else names | recorded
    removals: list[RemoveBase] = []
    for host in sorted(volumes):
        names = held.get(host, set())
        if names is None or fleets.get(host) or host in busy:
            continue
        pool = set(volumes[host])
        bases = {v.removesuffix(MARKER_SUFFIX) for v in pool}
        for base in sorted(b for b in bases if is_base_volume(b)):
            if base in needed or base in names:
                continue
            found = tuple(v for v in (base, base_marker_name(base)) if v in pool)
            reason = (
                f"base image {base} is unused: no image of fleet.yaml needs it "
                f"and no VM of this fleet on {host} records it"
            )
            removals.append(RemoveBase(reason=reason, host=host, base=base, volumes=found))
    return removals


def _needed(repo: Repo, actions: Iterable[Action]) -> set[str]:
    """Every base name an image of the repo, or a new VM of this plan, builds on."""
    needed = {base_volume_name(image) for image in repo.fleet.images}
    for named in {proxy.placement.image for proxy in repo.proxies}:  # each name once
        image = resolve_image(repo.fleet, named)
        if image is not None:
            needed.add(base_volume_name(image))
    needed.update(base_volume_name(a.vm.image) for a in actions if isinstance(a, Create | Replace))
    return needed


def _recorded(owner: Owner) -> set[str] | None:
    """The bases a VM's record says it may use; None when it records no image at all."""
    if owner.image_base:
        return {owner.image_base}
    if owner.image_key:
        return set(legacy_base_names(owner.image_key))
    return None
