"""Deletes run on lanes: libvirt connections of their own over the host's one SSH link,
against a real libvirtd through sshd. libvirtd serves 5 calls of one connection at once;
lanes let more deletes than that run side by side."""

from __future__ import annotations

import subprocess
import threading
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest
from hostservices import BlankImage

from reconciler.adapters.hypervisor.libvirthost import LibvirtHost
from reconciler.adapters.hypervisor.transport.lanes import CALLS_PER_LANE
from reconciler.model.settings import LIBVIRT_TRANSPORTS, SshSettings
from reconciler.model.vm import VmSpec

pytestmark = pytest.mark.filterwarnings("error::pytest.PytestUnhandledThreadExceptionWarning")


@pytest.fixture(params=LIBVIRT_TRANSPORTS)
def settings(request: pytest.FixtureRequest, settings: SshSettings) -> SshSettings:
    """Lanes over either ``ssh.libvirtTransport``: more channels of the paramiko link, or
    more forwarded channels of the one ``ssh -N -L`` child."""
    return replace(settings, libvirt_transport=request.param)


VIA = {"openssh": "openssh-streamlocal", "paramiko": "streamlocal"}


def libvirtd_clients() -> int:
    """Clients libvirtd has now, as its admin interface lists them."""
    out = subprocess.run(
        ["virt-admin", "srv-clients-list", "libvirtd"],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    ).stdout
    rows = out.split("\n-", 1)[1].splitlines()[1:]
    return sum(1 for row in rows if row.strip())


def hostname_in_lanes(adapter: LibvirtHost, threads: int) -> list[Any]:
    """``threads`` threads, all inside a lane at once, each asks libvirtd for its host
    name; the connection each one's call went over."""
    session = adapter.session
    used: list[Any] = []
    inside = threading.Barrier(threads)
    lock = threading.Lock()

    def ask() -> None:
        with session.lane():
            inside.wait(timeout=30)
            conn = session.connection()
            session.call("virConnectGetHostname", lambda c: c.getHostname())
            with lock:
                used.append(conn)
            inside.wait(timeout=30)

    workers = [threading.Thread(target=ask) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=60)
    assert len(used) == threads
    return used


def test_a_call_in_a_lane_goes_over_a_second_libvirtd_client_on_the_same_link(
    adapter: LibvirtHost, settings: SshSettings
) -> None:
    session = adapter.session
    main = session.connection()
    assert session.via == VIA[settings.libvirt_transport]
    before = libvirtd_clients()

    with session.lane():
        lane = session.connection()
        name = session.call("virConnectGetHostname", lambda c: c.getHostname())
        assert session.connection() is lane
        during = libvirtd_clients()

    assert lane is not main
    assert name == main.getHostname()
    assert during == before + 1
    assert session.connection() is main
    assert session.lanes_dialled == 1


def test_ten_threads_in_lanes_at_once_use_two_connections_beside_the_main_one(
    adapter: LibvirtHost,
) -> None:
    main = adapter.session.connection()
    before = libvirtd_clients()

    used = hostname_in_lanes(adapter, 2 * CALLS_PER_LANE)

    lanes = {id(conn): conn for conn in used}
    assert len(lanes) == 2
    assert main not in lanes.values()
    assert sorted(sum(1 for conn in used if conn is lane) for lane in lanes.values()) == [5, 5]
    assert libvirtd_clients() == before + 2


def test_a_dropped_link_takes_its_lanes_and_the_next_call_in_a_lane_dials_afresh(
    adapter: LibvirtHost,
) -> None:
    session = adapter.session
    with session.lane():
        first = session.connection()
    session.close()
    assert session.lanes_dialled == 0

    with session.lane():
        second = session.connection()
        name = session.call("virConnectGetHostname", lambda c: c.getHostname())

    assert second is not first
    assert name
    assert session.lanes_dialled == 1


def test_a_delete_runs_on_a_lane_and_leaves_nothing_behind(
    adapter: LibvirtHost,
    blank_image: BlankImage,
    make_spec: Callable[..., VmSpec],
    cleanup_domains: list[str],
    local_conn: Any,
) -> None:
    spec = make_spec("lane1", blank_image.image)
    cleanup_domains.append(spec.domain)
    adapter.ensure_image(blank_image.image, blank_image.path)
    adapter.create(spec)
    assert adapter.session.lanes_dialled == 0

    adapter.delete(spec.domain)

    assert adapter.session.lanes_dialled == 1
    assert spec.domain not in [d.name() for d in local_conn.listAllDomains(0)]
    pool = local_conn.storagePoolLookupByName(spec.host.pool)
    pool.refresh(0)
    names = set(pool.listVolumes())
    assert spec.overlay_name not in names
    assert spec.seed_name not in names
