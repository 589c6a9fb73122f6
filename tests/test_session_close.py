"""A closing libvirt session drops its connections only once the link under them is gone."""

from __future__ import annotations

from pathlib import Path

from reconciler.adapters.hypervisor.transport.lanes import Lane
from reconciler.adapters.hypervisor.transport.libvirtrpc import LibvirtSession
from reconciler.model import Host, HostNetwork
from reconciler.model.settings import SshSettings

HOST = Host(name="kvm01", address="10.0.0.5", zone="a", network=HostNetwork("bridge", "br0"))


class Bridge:
    """Stands in for the ``ssh`` child or the paramiko bridge: only whether it closed."""

    closed = False
    stderr_tail = ""
    uri = "qemu+unix:///system?socket=/nonexistent"

    def prepare(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True


class Conn:
    """A libvirt connection that notes whether its link was closed when it was let go
    (libvirt-python closes a connection, a round trip, when its last reference goes)."""

    def __init__(self, bridge: Bridge, seen: list[bool]) -> None:
        self._bridge = bridge
        self._seen = seen

    def __del__(self) -> None:
        self._seen.append(self._bridge.closed)


def test_closing_lets_go_of_the_main_and_every_lane_connection_after_the_link_closed(
    tmp_path: Path,
) -> None:
    settings = SshSettings(key_file=tmp_path / "key", known_hosts_file=tmp_path / "known")
    session = LibvirtSession(HOST, settings)
    bridge, seen = Bridge(), []
    session._carrier.bridge = bridge  # type: ignore[assignment]
    session._conn = Conn(bridge, seen)
    session._lanes._lanes.extend(Lane(conn=Conn(bridge, seen)) for _ in range(2))

    session.close()

    assert seen == [True, True, True]
