"""The daemon's observe (``watch``) against a real libvirtd over sshd: owners are read once,
then again only for domains libvirt's events name, and never trusted across a redial.

Each change here is made on the tests' own connection (``local_conn``), as an operator's
``virsh`` would: the adapter learns of it only through libvirt's domain events.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import libvirt
import pytest
from hostservices import BlankImage, Sshd, wait_for

from reconciler.adapters.hypervisor.libvirthost import LibvirtHost
from reconciler.adapters.hypervisor.transport.ownerwatch import OwnerCache
from reconciler.core.render.domainxml import domain_xml
from reconciler.core.render.metadata import NAMESPACE, PREFIX, owner_xml
from reconciler.model import DomainState, Host, Owner
from reconciler.model.settings import SshSettings
from reconciler.model.vm import VmSpec

pytestmark = pytest.mark.filterwarnings("error::pytest.PytestUnhandledThreadExceptionWarning")


def define(local_conn: Any, spec: VmSpec) -> Any:
    return local_conn.defineXML(
        domain_xml(spec, disk_path="/nonexistent/disk.qcow2", seed_path="/nonexistent/seed.iso")
    )


def owners(adapter: LibvirtHost) -> dict[str, Owner | None]:
    return {d.name: d.owner for d in adapter.observe().domains}


def forgotten(adapter: LibvirtHost, *doms: Any) -> Callable[[], bool]:
    """True once the adapter's cache no longer holds any of ``doms`` (their event arrived)."""

    def check() -> bool:
        cache = adapter.session.owners()
        assert isinstance(cache, OwnerCache)
        return not any(cache.get(dom.UUIDString())[0] for dom in doms)

    return check


def test_a_watching_observe_reads_again_only_the_domains_libvirt_says_changed(
    make_host: Callable[..., LibvirtHost],
    blank_image: BlankImage,
    make_spec: Callable[..., VmSpec],
    local_conn: Any,
    cleanup_domains: list[str],
) -> None:
    specs = [make_spec(f"watch-{i}", blank_image.image) for i in range(6)]
    doms = []
    for spec in specs:
        cleanup_domains.append(spec.domain)
        doms.append(define(local_conn, spec))
    calls: Counter[str] = Counter()
    adapter = make_host(observer=lambda rpc, _host, _seconds, _ok: calls.update([rpc]), watch=True)

    first = owners(adapter)
    listed = len(first)
    assert calls["virDomainGetMetadata"] == listed
    assert calls["virConnectDomainEventRegisterAny"] == 1
    assert all(first[s.domain] == s.owner for s in specs)
    calls.clear()
    assert owners(adapter) == first
    assert calls["virDomainGetMetadata"] == 0, "nothing changed: nothing read again"
    assert calls["virConnectGetAllDomainStats"] == 1, "states are read every time"

    # Behind the adapter's back: one disowned, one given another owner, one replaced by a
    # new domain of the same name (a new UUID), one started (a lifecycle event only).
    doms[0].setMetadata(
        libvirt.VIR_DOMAIN_METADATA_ELEMENT, None, None, NAMESPACE, libvirt.VIR_DOMAIN_AFFECT_CONFIG
    )
    relabelled = replace(specs[1].owner, protect=True)
    doms[1].setMetadata(
        libvirt.VIR_DOMAIN_METADATA_ELEMENT,
        owner_xml(relabelled),
        PREFIX,
        NAMESPACE,
        libvirt.VIR_DOMAIN_AFFECT_CONFIG,
    )
    doms[2].undefine()
    renamed = replace(specs[2], owner=replace(specs[2].owner, proxy="watch-other"))
    define(local_conn, renamed)
    wait_for(forgotten(adapter, doms[0], doms[1]), "the metadata events", timeout=10)
    calls.clear()

    now = owners(adapter)

    assert now[specs[0].domain] is None, "disowned: foreign from now on"
    assert now[specs[1].domain] == relabelled
    assert now[specs[2].domain] == renamed.owner
    assert all(now[s.domain] == s.owner for s in specs[3:])
    assert calls["virDomainGetMetadata"] == 3, "only the three changed domains were read"


def test_our_own_owner_write_is_seen_by_the_next_observe_without_waiting_for_its_event(
    make_host: Callable[..., LibvirtHost],
    blank_image: BlankImage,
    make_spec: Callable[..., VmSpec],
    cleanup_domains: list[str],
    local_conn: Any,
) -> None:
    spec = make_spec("watch-relabel", blank_image.image)
    cleanup_domains.append(spec.domain)
    adapter = make_host(watch=True)
    adapter.ensure_image(blank_image.image, blank_image.path)
    adapter.create(spec)
    assert owners(adapter)[spec.domain] == spec.owner
    protected = replace(spec.owner, protect=True)

    adapter.set_owner(spec.domain, protected)

    assert owners(adapter)[spec.domain] == protected
    local_conn.lookupByName(spec.domain).destroy()
    seen = {d.name: d for d in adapter.observe().domains}[spec.domain]
    assert (seen.state, seen.owner) == (DomainState.SHUTOFF, protected)
    adapter.delete(spec.domain)
    assert spec.domain not in owners(adapter)


def test_a_redial_starts_with_no_owner_known_and_registers_its_callbacks_again(
    own_sshd: Callable[..., Sshd],
    make_host: Callable[..., LibvirtHost],
    host: Host,
    settings: SshSettings,
    blank_image: BlankImage,
    make_spec: Callable[..., VmSpec],
    local_conn: Any,
    cleanup_domains: list[str],
) -> None:
    spec = make_spec("watch-redial", blank_image.image)
    cleanup_domains.append(spec.domain)
    define(local_conn, spec)
    server = own_sshd()
    ssh = replace(
        settings, key_file=server.keys.client_key, known_hosts_file=server.keys.known_hosts
    )
    calls: Counter[str] = Counter()
    adapter = make_host(
        replace(host, port=server.port),
        ssh,
        observer=lambda rpc, _host, _seconds, _ok: calls.update([rpc]),
        watch=True,
    )
    listed = len(owners(adapter))
    old = adapter.session.owners()
    assert old is not None and len(old) == listed

    server.restart()  # every session dropped: events sent meanwhile would be lost
    calls.clear()
    again = owners(adapter)

    assert calls["virConnectOpen"] == 1
    assert calls["virConnectDomainEventRegisterAny"] == 1
    assert calls["virDomainGetMetadata"] == len(again) == listed, "every owner read again"
    assert again[spec.domain] == spec.owner
    assert adapter.session.owners() is not old
    assert old.conn is None, "the dropped connection's callbacks were deregistered"


def test_closing_a_watching_host_whose_sshd_answers_nothing_returns(
    own_sshd: Callable[..., Sshd],
    make_host: Callable[..., LibvirtHost],
    host: Host,
    settings: SshSettings,
) -> None:
    """The callbacks are deregistered after the link is cut, so that call cannot wait on a
    host that hangs (a daemon stopping must not wedge on one host)."""
    server = own_sshd()
    ssh = replace(
        settings, key_file=server.keys.client_key, known_hosts_file=server.keys.known_hosts
    )
    adapter = make_host(replace(host, port=server.port), ssh, watch=True)
    adapter.observe()
    cache = adapter.session.owners()
    assert cache is not None and cache.conn is not None
    with server.frozen():
        began = time.monotonic()
        closing = threading.Thread(target=adapter.close, daemon=True)
        closing.start()
        closing.join(timeout=60)
        print(f"close with every sshd session stopped: {time.monotonic() - began:.2f} s")
        assert not closing.is_alive(), "close() still waiting after 60 s"
    assert cache.conn is None
