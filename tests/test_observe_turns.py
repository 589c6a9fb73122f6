"""Hosts observed at once build their domains in turn (hostobserve.BUILDING), and no host
holds that turn while it waits on its link: a host whose owner read hangs does not hold up
another host's observe."""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

from reconciler.adapters.hypervisor.observe.hostobserve import observe_host
from reconciler.adapters.hypervisor.transport.ownerwatch import OwnerCache
from reconciler.core.render.metadata import owner_xml
from reconciler.errors import NotFoundError
from reconciler.model import DomainState, Host, HostNetwork, Owner

NETWORK = HostNetwork("bridge", "br0")
RUNNING = {"state.state": 1, "state.reason": 1, "vcpu.current": 1, "balloon.current": 1 << 20}


class Dom:
    def __init__(self, name: str, text: str, hang: threading.Event | None = None) -> None:
        self._name, self._text, self._hang = name, text, hang
        self.conn: Conn | None = None  # set by the Conn that lists it

    def info(self) -> list[int]:
        """virDomainGetInfo: state, maximum and current memory (KiB), vCPUs, CPU time."""
        assert self.conn is not None
        self.conn.calls["info"] += 1
        desc = self.conn.described(self._name)
        if desc.get("gone"):
            raise NotFoundError(f"no domain {self._name}")
        current = desc.get("balloon.current", 0)
        return [
            desc["state.state"],
            desc.get("balloon.maximum", current),
            current,
            desc.get("vcpu.current", 0),
            desc.get("vcpu.0.time", 0),
        ]

    def name(self) -> str:
        return self._name

    def UUIDString(self) -> str:
        return f"uuid-{self._name}"

    def metadata(self, *_args: object) -> str:
        if self.conn is not None:
            self.conn.calls["metadata"] += 1
        if self._hang is not None:
            self._hang.wait()  # the read is on the wire of a link that stopped answering
        return self._text


class Pool:
    def refresh(self, _flags: int) -> None:
        pass

    def listAllVolumes(self, _flags: int) -> list[Any]:
        return []

    def info(self) -> list[int]:
        return [2, 100 << 30, 0, 100 << 30]


class Conn:
    """A host whose domains are described by what libvirt would report of them: state and
    reason through the bulk stats' state group, vCPUs and memory through virDomainGetInfo."""

    def __init__(self, doms: list[Dom], stats: dict[str, dict[str, Any]] | None = None) -> None:
        self.doms, self.stats = doms, stats or {}
        self.calls: Counter[str] = Counter()
        self.groups: list[int] = []
        for dom in doms:
            dom.conn = self

    def described(self, name: str) -> dict[str, Any]:
        return self.stats.get(name, RUNNING)

    def getInfo(self) -> list[Any]:
        return ["x86_64", 16384, 4]

    def getAllDomainStats(self, stats: int, _flags: int) -> list[tuple[Dom, dict[str, int]]]:
        self.groups.append(stats)
        return [
            (dom, {k: v for k, v in self.described(dom.name()).items() if k.startswith("state.")})
            for dom in self.doms
        ]


class Session:
    """What observe_host asks of a LibvirtSession: calls on one connection, the owners (the
    daemon's cache; None: apply's session, which reads every owner)."""

    tracing = False

    def __init__(
        self,
        doms: list[Dom],
        owners: OwnerCache | None,
        stats: dict[str, dict[str, Any]] | None = None,
    ) -> None:
        self.conn, self._owners = Conn(doms, stats), owners

    def owners(self) -> OwnerCache | None:
        return self._owners

    def call(self, _rpc: str, fn: Any, **_ids: object) -> Any:
        return fn(self.conn)


class Images:
    def pool(self) -> Pool:
        return Pool()


def owner(proxy: str) -> Owner:
    return Owner(fleet="f", proxy=proxy, digest="d" * 64)


def test_a_host_whose_owner_read_hangs_does_not_hold_up_another_hosts_observe() -> None:
    hang = threading.Event()
    stuck = Session([Dom("pf-a", owner_xml(owner("a")), hang)], OwnerCache())
    known = OwnerCache()
    doms = [Dom(f"pf-b{i}", owner_xml(owner(f"b{i}"))) for i in range(50)]
    for dom in doms:
        known.put(dom.UUIDString(), known.begin(), dom.metadata())
    answering = Session(doms, known)
    found: dict[str, Any] = {}

    def observe(name: str, session: Session) -> None:
        host = Host(name=name, address=f"{name}.test", zone="z", network=NETWORK)
        found[name] = observe_host(session, Images(), host)  # type: ignore[arg-type]

    first = threading.Thread(target=observe, args=("stuck", stuck), daemon=True)
    first.start()
    second = threading.Thread(target=observe, args=("answering", answering), daemon=True)
    second.start()
    second.join(timeout=30)
    try:
        assert not second.is_alive(), "the answering host waited for the hung one"
        assert "stuck" not in found
        domains = found["answering"].domains
        assert [d.name for d in domains] == sorted(d.name() for d in doms)
        assert {d.state for d in domains} == {DomainState.RUNNING}
        assert {d.owner for d in domains} == {owner(f"b{i}") for i in range(50)}
    finally:
        hang.set()
        first.join(timeout=30)
    assert [d.owner for d in found["stuck"].domains] == [owner("a")]
