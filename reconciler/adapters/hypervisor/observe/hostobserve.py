"""What one host holds, read in a few RPCs: pool volumes and space, node size, owned domains.

``observe_host`` is ``LibvirtHost.observe``; libvirt's domain states and
failure reasons are mapped here to the model's ``DomainState`` and reason
words the planner acts on.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

import libvirt

from reconciler.adapters.hypervisor.images.baseimage import BaseImages
from reconciler.adapters.hypervisor.transport.libvirtrpc import LibvirtSession
from reconciler.adapters.hypervisor.transport.ownerwatch import OwnerCache
from reconciler.core.render.metadata import NAMESPACE, parse_owner
from reconciler.errors import NotFoundError, PermanentError, TransientError
from reconciler.model import Domain, DomainState, Host, HostInventory
from reconciler.model.inventory import Capacity

log = logging.getLogger("reconciler.host")

STATES = {
    libvirt.VIR_DOMAIN_RUNNING: DomainState.RUNNING,
    libvirt.VIR_DOMAIN_BLOCKED: DomainState.RUNNING,
    libvirt.VIR_DOMAIN_PAUSED: DomainState.PAUSED,
    libvirt.VIR_DOMAIN_PMSUSPENDED: DomainState.PAUSED,
    libvirt.VIR_DOMAIN_SHUTOFF: DomainState.SHUTOFF,
    libvirt.VIR_DOMAIN_CRASHED: DomainState.CRASHED,
}
FAILURE_REASONS = {
    (libvirt.VIR_DOMAIN_SHUTOFF, libvirt.VIR_DOMAIN_SHUTOFF_CRASHED): "crashed",
    (libvirt.VIR_DOMAIN_SHUTOFF, libvirt.VIR_DOMAIN_SHUTOFF_FAILED): "failed",
    (libvirt.VIR_DOMAIN_CRASHED, libvirt.VIR_DOMAIN_CRASHED_PANICKED): "panicked",
    (libvirt.VIR_DOMAIN_CRASHED, libvirt.VIR_DOMAIN_CRASHED_UNKNOWN): "crashed",
    (libvirt.VIR_DOMAIN_PAUSED, libvirt.VIR_DOMAIN_PAUSED_IOERROR): "ioerror",
    (libvirt.VIR_DOMAIN_PAUSED, libvirt.VIR_DOMAIN_PAUSED_USER): "user",
}
"""libvirt state reasons the planner acts on: a domain down through a failure
(self-healing), paused by the hypervisor on an I/O error (a full pool) or by a person."""
OBSERVED_STATS = libvirt.VIR_DOMAIN_STATS_STATE
"""One bulk RPC for every domain's state and reason. Only the state group: libvirtd answers
it from what it holds, without the domain's job or its QEMU. The vCPU and balloon groups
take each running domain's job and ask its QEMU over the monitor (memory statistics) even
though ``vcpu.current`` and ``balloon.current`` are libvirtd's own: with 20 running TCG
guests on the lab's two cores that one call took 1.5-2.0 s against 2-6 ms for the state
alone, and a QEMU that stopped answering kept it waiting (docs/performance.md, "Observing
running guests"). A running domain's sizes come from ``virDomainGetInfo`` instead
(``SIZED_STATES``)."""
OBSERVED_STATS_FLAGS = libvirt.VIR_CONNECT_GET_ALL_DOMAINS_STATS_NOWAIT
"""Never wait for a domain's job. The state group takes none; this keeps any group added
later from waiting on a QEMU that does not answer (docs/hosts.md "A QEMU that does not
answer")."""
SIZED_STATES = frozenset({libvirt.VIR_DOMAIN_RUNNING, libvirt.VIR_DOMAIN_BLOCKED})
"""libvirt states whose vCPUs and memory the planner uses (hand edits, a host's capacity):
one ``virDomainGetInfo`` each, which reads libvirtd's own definition of the running domain
and the QEMU process's CPU time from ``/proc``, with no job and no monitor call."""
OBSERVE_READS = 4
"""Metadata reads in flight at once on one host's connection while observing. libvirtd
serves up to ``max_client_requests`` (default 5) calls of one client at a time."""
READS_IN_FLIGHT = 8
"""Metadata reads in flight across all the hosts this process observes at once: each host
gets ``READS_IN_FLIGHT // hosts`` readers, between 1 and ``OBSERVE_READS``. One host or two
get four readers, so their round trips overlap; ten get one each, because the reads of ten
hosts already overlap, and forty reader threads cost more of the process's one core for
Python (their hand-offs) than the overlap gains: 0.34 s of CPU per observe of 10 hosts with
2,000 domains against 0.21 s (docs/performance.md, row 7)."""

DOMAINS_KEPT = 16384
"""Observed domains remembered by everything they are made of (name, owner text, state,
size): an idle fleet's domains read the same in every cycle, and looking one up costs a
fraction of building it (its state words, sizes and owner)."""

BUILDING = threading.Lock()
"""Held while one host's bulk stats become the model (no RPC under it): the hosts observed
at once take turns instead of contending for the interpreter every few microseconds. Ten
hosts of 200 domains each: about 60 ms of CPU per observe against 80 (docs/performance.md,
row 7)."""


class _Observing:
    """How many host observes this process is running now (for the readers' share)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._count = 0

    @contextmanager
    def one(self) -> Iterator[None]:
        with self._lock:
            self._count += 1
        try:
            yield
        finally:
            with self._lock:
                self._count -= 1

    def readers(self) -> int:
        """Readers for one host's metadata reads now."""
        return max(1, min(OBSERVE_READS, READS_IN_FLIGHT // max(1, self._count)))


OBSERVING = _Observing()


def observe_host(session: LibvirtSession, images: BaseImages, host: Host) -> HostInventory:
    """The pool's volume names and space (3 RPCs), the node's CPUs and memory (1 RPC),
    1 RPC for every domain's state and reason, then for each running domain its vCPUs and
    memory (``virDomainGetInfo``) and for each domain one metadata read.

    Volumes are listed before domains: a domain defined in between is then
    seen with its volumes, never the other way round (volumes that look
    unused). A pool that does not exist gives no volumes (``hosts check``
    reports it); any other failure fails the observation.

    ``virDomainGetMetadata`` returns only our element (about 400 bytes), not
    the whole domain XML, which libvirtd takes several times longer to
    format; a domain without our element answers VIR_ERR_NO_DOMAIN_METADATA
    and is foreign. The reads run up to ``OBSERVE_READS`` at a time on the one
    connection (libvirt multiplexes calls), so the link's round trips
    overlap instead of adding up; fewer when many hosts are observed at once
    (``READS_IN_FLIGHT``). A session that watches (the daemon) reads only the domains
    whose owner it does not know unchanged since an earlier read
    (reconciler.adapters.hypervisor.transport.ownerwatch): on an idle fleet, none.
    """
    with OBSERVING.one():
        return _observe(session, images, host)


def _observe(session: LibvirtSession, images: BaseImages, host: Host) -> HostInventory:
    """``observe_host`` inside the count of observes running."""
    owners = session.owners()  # before listing: a domain changed after it is read again
    volumes, pool_space = _volume_names(session, images, host)
    node = session.call("virNodeGetInfo", lambda c: c.getInfo())
    stats = session.call(
        "virConnectGetAllDomainStats",
        lambda c: c.getAllDomainStats(OBSERVED_STATS, OBSERVED_STATS_FLAGS),
    )
    found: list[Domain | None] = []
    unread: list[tuple[Any, dict[str, Any]]] = stats
    if owners is not None:  # known and not running: on this thread, no reader wakes for them
        unread = []
        with BUILDING:
            for dom, values in stats:
                known = None if _sized(values) else _known_owner(dom, values, owners)
                if known is None:
                    unread.append((dom, values))
                else:
                    found.append(known)
    workers = min(OBSERVING.readers(), len(unread))

    pending = iter(unread)
    taking = threading.Lock()

    def read() -> list[Domain | None]:
        """The next domain not yet taken, until none is left: a reader that started late
        or met slow answers takes fewer."""
        read_here: list[Domain | None] = []
        while True:
            with taking:
                item = next(pending, None)
            if item is None:
                return read_here
            read_here.append(_read_domain(session, host, *item, owners))

    if workers <= 1:
        found.extend(read())
    else:
        # One task per reader, not per domain: a task per domain cost a future, a queue
        # hand-off and a thread wake-up each, more CPU than the read's.
        with ThreadPoolExecutor(workers, thread_name_prefix=f"observe-{host.name}") as pool:
            readers = [pool.submit(read) for _ in range(workers)]
            found.extend(domain for reader in readers for domain in reader.result())
    with BUILDING:
        domains = sorted((d for d in found if d is not None), key=lambda d: d.name)
    capacity = None
    if pool_space is not None:
        capacity = Capacity(
            cpus=int(node[2]),
            memory_mib=int(node[1]),
            pool_capacity_bytes=pool_space[0],
            pool_available_bytes=pool_space[1],
        )
    return HostInventory(
        name=host.name,
        reachable=True,
        domains=tuple(domains),
        volumes=volumes,
        capacity=capacity,
    )


def _volume_names(
    session: LibvirtSession, images: BaseImages, host: Host
) -> tuple[tuple[str, ...], tuple[int, int] | None]:
    """The pool's volume names and (capacity, available) bytes; none without a pool."""
    try:
        pool = images.pool()
    except PermanentError as exc:
        log.debug("host %s: no volumes listed: %s", host.name, exc)
        return (), None
    # libvirt counts a dir pool's free space at its last refresh (and its own volume
    # calls): a guest's growing overlay, or any file written beside it, shows only after
    # one. Without it a full pool still reads as free, so a VM paused on a full pool
    # would be resumed into the same wall and placement would trust stale room.
    try:
        session.call("virStoragePoolRefresh", lambda _c: pool.refresh(0))
    except (PermanentError, TransientError) as exc:  # e.g. an upload running into it
        log.info("host %s: pool %s not refreshed: %s", host.name, host.pool, exc)
    listed = session.call("virStoragePoolListAllVolumes", lambda _c: pool.listAllVolumes(0))
    _state, capacity, _allocation, available = session.call(
        "virStoragePoolGetInfo", lambda _c: pool.info()
    )
    names = tuple(sorted(volume.name() for volume in listed))
    return names, (int(capacity), int(available))


def _sized(values: dict[str, Any]) -> bool:
    """Whether the domain of these bulk stats runs, so that its vCPUs and memory count."""
    return values.get("state.state") in SIZED_STATES


def _known_owner(dom: Any, values: dict[str, Any], owners: OwnerCache) -> Domain | None:
    """The domain with the owner ``owners`` knows unchanged since its last read; None
    when it must be read. Name and UUID are the domain object's own: no RPC."""
    known, text = owners.get(dom.UUIDString())
    return _observed(dom.name(), values, text) if known else None


def _read_domain(
    session: LibvirtSession,
    host: Host,
    dom: Any,
    values: dict[str, Any],
    owners: OwnerCache | None,
) -> Domain | None:
    """The domain with its owner (None: foreign); None when it vanished meanwhile.

    ``values`` are its bulk stats (state, reason); a running domain's sizes are read here.
    ``owners`` (the daemon's) answers for an owner it knows unchanged, and is told what a
    read found."""
    name = dom.name()
    if _sized(values):
        try:
            _state, maximum, current, vcpus, _cpu_time = session.call(
                "virDomainGetInfo", lambda _c: dom.info(), domain=name
            )
        except NotFoundError:
            log.debug("host %s: domain %s vanished while listing", host.name, name)
            return None
        values = {
            **values,
            "vcpu.current": int(vcpus),
            "balloon.current": int(current),
            "balloon.maximum": int(maximum),
        }
    uuid, began = "", 0
    if owners is not None:
        uuid = dom.UUIDString()  # known to the domain object: no RPC
        known, text = owners.get(uuid)
        if known:
            return _observed(name, values, text)
        began = owners.begin()
    try:
        raw = session.call("virDomainGetMetadata", _owner_of(dom), domain=name)
    except NotFoundError:
        log.debug("host %s: domain %s vanished while listing", host.name, name)
        return None
    except PermanentError as exc:
        # Listed as foreign so its name stays taken and nothing touches it.
        log.warning(
            "host %s: cannot read domain %s, treating it as foreign: %s", host.name, name, exc
        )
        return _observed(name, values, None)
    if owners is not None:
        owners.put(uuid, began, raw)
    domain = _observed(name, values, raw)
    if session.tracing:
        session.trace("virDomainGetMetadata", "owner", repr(domain.owner), domain=name)
    return domain


def _observed(name: str, values: dict[str, Any], owner_text: str | None) -> Domain:
    """The domain with its owner (decoded from ``owner_text``; None: foreign), state, failure
    reason and (when running) vCPUs and memory from its stats. Only the stats it uses pick
    the remembered domain: a running guest's vCPU times change in every cycle."""
    return _domain(
        name,
        owner_text,
        values.get("state.state", -1),
        values.get("state.reason", -1),
        values.get("vcpu.current"),
        values.get("balloon.current"),
        values.get("balloon.maximum"),
    )


@functools.lru_cache(maxsize=DOMAINS_KEPT)
def _domain(
    name: str,
    owner_text: str | None,
    raw_state: int,
    raw_reason: int,
    vcpu_current: object,
    balloon_current: object,
    balloon_maximum: object,
) -> Domain:
    """``_observed`` by value: the same values make the same (frozen) domain."""
    state = STATES.get(raw_state, DomainState.OTHER)
    reason = FAILURE_REASONS.get((raw_state, raw_reason), "")
    vcpus = memory = None
    if state is DomainState.RUNNING:
        vcpus = vcpu_current if isinstance(vcpu_current, int) else None
        known = [int(v) for v in (balloon_current, balloon_maximum) if isinstance(v, int)]
        # setmem moves the balloon (current), setmaxmem the maximum: the smaller is what runs.
        memory = min(known) // 1024 if known else None
    return Domain(
        name=name,
        state=state,
        reason=reason,
        vcpus=vcpus,
        memory_mib=memory,
        owner=parse_owner(owner_text),
    )


def _owner_of(dom: Any) -> Callable[[Any], str | None]:
    """Our metadata element of ``dom`` as libvirt returns it; None when it has none (foreign)."""

    def call(_conn: Any) -> str | None:
        try:
            text: str = dom.metadata(libvirt.VIR_DOMAIN_METADATA_ELEMENT, NAMESPACE, 0)
        except libvirt.libvirtError as exc:
            if exc.get_error_code() == libvirt.VIR_ERR_NO_DOMAIN_METADATA:
                return None
            raise
        return text

    return call
