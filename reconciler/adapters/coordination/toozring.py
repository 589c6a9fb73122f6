"""``ToozRing``: the fleet ring (reconciler.ports.ring) over tooz's partitioned groups.

For each fleet it lists, the daemon joins the tooz group ``proxyfleet.ring.<fleet>``
as ``join_partitioned_group`` does (capabilities naming box and pid beside the
weight) and keeps a ``tooz.partitioner.Partitioner`` on it: a consistent hash ring
(``tooz.hashring``) over the group's members, kept current by ``run_watchers``. The
owner of a fleet is the member the ring maps the fleet id to. A group per fleet,
rather than one for all, because daemons need not list the same fleets: only those
that list a fleet are candidates for it. Where they do list the same fleets, every
group has the same members and therefore the same ring, so the fleets spread as they
would on one.

Verified with the drivers as installed (tooz 9.1, etcd3gw 2.7), not assumed:

- etcd (``etcd3+http``): a member's key is bound to the coordinator's membership
  lease (``membership_timeout``, set to the TTL); ``heartbeat`` renews it. A daemon
  that dies or is cut off drops out of every group when the lease runs out.
- file: a member is a file in the lock directory and ``get_members`` ignores one not
  touched for ``timeout`` seconds (set to the TTL here); ``heartbeat`` touches it. A
  SIGKILLed daemon's file stays but stops counting after the TTL.
- Neither driver runs watchers on its own: ``refresh`` heartbeats and calls
  ``run_watchers``, which compares the members with the last read and updates the ring.
- What the partitioner does not do, done here: joining again when our own membership
  lapsed (a lease that ran out while the service was unreachable; tooz then renews a
  fresh, empty lease), starting over when a watcher failed half-way (a member that
  left between the read of the members and the read of its capabilities), and starting
  over when its ring is not the group's members (a join or leave between the
  partitioner's read of the members and its watchers' snapshot is never reported).

Every tooz failure becomes CoordinationError here, once.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import urllib.parse
from collections.abc import Sequence
from typing import Any

from tooz import coordination
from tooz.partitioner import Partitioner

from reconciler.adapters.coordination.fleetlock import holder_gone
from reconciler.adapters.coordination.toozlock import _why, failures
from reconciler.adapters.coordination.toozurl import driver_url
from reconciler.errors import CoordinationError
from reconciler.model.coordination import Holder

log = logging.getLogger(__name__)


def ring_url(url: str, ttl: float) -> str:
    """``driver_url`` but, for the file driver, a membership timeout of ``ttl`` (a ring
    member that stops renewing must drop out, unlike a lock's holder record)."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme == "file":
        options = dict(urllib.parse.parse_qsl(parts.query))
        options.setdefault("timeout", str(max(1, int(ttl))))
        url = urllib.parse.urlunsplit(parts._replace(query=urllib.parse.urlencode(options)))
    return driver_url(url, ttl)


def group_of(fleet: str) -> bytes:
    return f"proxyfleet.ring.{fleet}".encode()


class ToozRing:
    """See the module docstring. ``refresh`` from one thread; the rest from any."""

    def __init__(
        self, url: str, *, member: str, fleets: Sequence[str], me: Holder, ttl: float
    ) -> None:
        self._url = ring_url(url, ttl)
        self._member = member
        self._id = member.encode()
        self._fleets = tuple(fleets)
        self._caps: dict[str, Any] = {"weight": 1, "box": me.box, "pid": me.pid, "role": "daemon"}
        self._mu = threading.Lock()
        self._coord: coordination.CoordinationDriver | None = None
        self._parts: dict[str, Partitioner] = {}
        self._joined: set[str] = set()
        """Fleets whose group this coordinator joined (and has not left)."""
        # Replaced whole after each refresh, so that readers need no lock.
        self._view: tuple[dict[str, str | None], dict[str, tuple[str, ...]]] = ({}, {})

    @property
    def member(self) -> str:
        return self._member

    def owner(self, fleet: str) -> str | None:
        return self._view[0].get(fleet)

    def members(self, fleet: str) -> tuple[str, ...]:
        return self._view[1].get(fleet, ())

    def refresh(self) -> None:
        with self._mu:
            try:
                coord = self._coordinator_locked()
                coord.heartbeat()
                coord.run_watchers()
                owners: dict[str, str | None] = {}
                members: dict[str, tuple[str, ...]] = {}
                for fleet in self._fleets:
                    part = self._parts.get(fleet) or self._join_locked(coord, fleet)
                    if self._id not in part.ring.nodes:
                        self._rejoin_locked(coord, fleet, part)
                    part = self._checked_locked(coord, fleet, part)
                    nodes = part.ring.nodes
                    members[fleet] = tuple(sorted(_text(n) for n in nodes))
                    owners[fleet] = (
                        _text(next(iter(part.members_for_object(fleet)))) if nodes else None
                    )
            except failures() as exc:
                self._forget_locked()
                raise CoordinationError(f"reading the fleet ring: {_why(exc)}") from exc
            changed = owners != self._view[0]
            self._view = (owners, members)
        if changed:
            log.info(
                "Fleet ring: %s.",
                ", ".join(f"{f} -> {o or 'nobody'}" for f, o in sorted(owners.items())),
            )

    def close(self) -> None:
        with self._mu:
            coord, self._coord = self._coord, None
            parts, self._parts = self._parts, {}
            self._joined.clear()
            if coord is None:
                return
            for fleet, part in parts.items():
                with contextlib.suppress(*failures()):
                    coord.leave_partitioned_group(part)
                    log.debug("Left the ring of fleet %s.", fleet)
            with contextlib.suppress(*failures()):
                coord.stop()

    # -- internals -------------------------------------------------------------

    def _coordinator_locked(self) -> coordination.CoordinationDriver:
        if self._coord is None:
            try:
                coord = coordination.get_coordinator(self._url, self._id)
                coord.start(start_heart=False)
            except ImportError as exc:
                raise CoordinationError(
                    f"the fleet ring's client library is not installed ({exc.name or exc})"
                ) from exc
            self._coord = coord
        return self._coord

    def _join_locked(self, coord: coordination.CoordinationDriver, fleet: str) -> Partitioner:
        group = group_of(fleet)
        if fleet not in self._joined:
            # What join_partitioned_group does, with capabilities that name the daemon
            # beside the weight the partitioner reads.
            _create(coord, group)
            try:
                coord.join_group(group, self._caps).get()
            except coordination.MemberAlreadyExist:
                # Our name is still there: this daemon before a restart (the record
                # outlives it by up to the TTL). A name a live process of this box still
                # uses is a configuration mistake.
                self._refuse_twin(coord, group)
                coord.leave_group(group).get()
                coord.join_group(group, self._caps).get()
            self._joined.add(fleet)
            log.info("Joined the ring of fleet %s as %s.", fleet, self._member)
        # After an error only the partitioner is made anew (it reads the members afresh);
        # the membership stands, so that a slow request does not look like a leave.
        part = Partitioner(coord, group)
        self._parts[fleet] = part
        return part

    def _checked_locked(
        self, coord: coordination.CoordinationDriver, fleet: str, part: Partitioner
    ) -> Partitioner:
        """``part``, or a new one if its ring is not the group's members as read now.

        A Partitioner reads the members for its ring before its watchers take their own
        snapshot; a member that joins or leaves between the two reads is never reported,
        and the ring stays wrong for as long as the partitioner lives (seen on etcd: two
        daemons each with a ring of itself alone, both owning every fleet). A new
        partitioner reads afresh; a change in its own window is caught here next time."""
        listed = set(coord.get_members(group_of(fleet)).get())
        ringed = set(part.ring.nodes)
        if listed == ringed:
            return part
        log.info(
            "The ring of fleet %s held %s but the group holds %s; reading it anew.",
            fleet,
            _names(ringed),
            _names(listed),
        )
        with contextlib.suppress(ValueError, KeyError):
            part.stop()
        del self._parts[fleet]
        return self._join_locked(coord, fleet)

    def _rejoin_locked(
        self, coord: coordination.CoordinationDriver, fleet: str, part: Partitioner
    ) -> None:
        log.warning(
            "Our membership in the ring of fleet %s lapsed (the service was out of reach "
            "for longer than the TTL); joining again.",
            fleet,
        )
        with contextlib.suppress(coordination.MemberAlreadyExist):
            coord.join_group(group_of(fleet), self._caps).get()
        part.ring.add_node(self._id)  # the watcher reports the join at the next refresh too

    def _refuse_twin(self, coord: coordination.CoordinationDriver, group: bytes) -> None:
        try:
            caps = coord.get_member_capabilities(group, self._id).get()
        except coordination.MemberNotJoined:
            return
        if not isinstance(caps, dict) or not isinstance(caps.get("pid"), int):
            return
        other = Holder(str(caps.get("box", "")), int(caps["pid"]))
        if other.pid == self._caps["pid"] or other.box != self._caps["box"]:
            return
        if not holder_gone(other):
            raise CoordinationError(
                f"ring member name {self._member!r} is in use by pid {other.pid} on this box; "
                "give each daemon sharing a coordination URL its own coordination.member"
            )

    def _forget_locked(self) -> None:
        """Drop the partitioners (not the membership): the next refresh reads the groups anew."""
        coord = self._coord
        parts, self._parts = self._parts, {}
        if coord is None:
            return
        for part in parts.values():
            with contextlib.suppress(*failures(), ValueError, KeyError):
                part.stop()


def _names(nodes: set[Any]) -> str:
    return ", ".join(sorted(_text(n) for n in nodes)) or "nobody"


def _text(node: object) -> str:
    return node.decode(errors="replace") if isinstance(node, bytes) else str(node)


def _create(coord: coordination.CoordinationDriver, group: bytes) -> None:
    """The group made if it is not there yet. tooz's ``join_group_create`` joins first and,
    on "no such group", creates it and tries again after a 1 s back-off: a second per
    fleet whenever a ring is new."""
    with contextlib.suppress(coordination.GroupAlreadyExist):
        coord.create_group(group).get()
