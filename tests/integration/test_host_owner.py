"""``set_owner`` rewrites a VM's ownership element through sshd against a real libvirtd.

A relabel (a changed ``lifecycle.protect``) must reach both the live and the
persistent definition, and ``observe`` must read back exactly what was
written, whatever state the domain is in.
"""

from __future__ import annotations

import logging
import threading
import xml.etree.ElementTree as ET
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import libvirt
import pytest
from hostservices import BlankImage

from reconciler.adapters.hypervisor.libvirthost import LibvirtHost
from reconciler.adapters.hypervisor.transport.libvirtrpc import RpcObserver
from reconciler.core.render.metadata import NAMESPACE, owner_from_domain_xml, parse_owner
from reconciler.errors import NotFoundError, PermanentError
from reconciler.model import DomainState, Owner
from reconciler.model.vm import VmSpec

pytestmark = pytest.mark.filterwarnings("error::pytest.PytestUnhandledThreadExceptionWarning")


def observed(adapter: LibvirtHost, domain: str) -> tuple[DomainState, Owner | None]:
    found = {d.name: d for d in adapter.observe().domains}[domain]
    return found.state, found.owner


def persistent_owner(local_conn: Any, domain: str) -> Owner | None:
    dom = local_conn.lookupByName(domain)
    return owner_from_domain_xml(dom.XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE))


def rpcs(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage().split()[0].removeprefix("rpc=")
        for r in caplog.records
        if r.name == "reconciler.libvirt" and r.getMessage().startswith("rpc=")
    ]


def after_the_state_check(act: Callable[[], None]) -> tuple[RpcObserver, threading.Event]:
    """An RPC observer that runs ``act`` once, right after the first virDomainIsActive
    once armed: the domain changes state between set_owner's check and its write."""
    armed = threading.Event()

    def observer(rpc: str, _host: str, _seconds: float, _ok: bool) -> None:
        if armed.is_set() and rpc == "virDomainIsActive":
            armed.clear()
            act()

    return observer, armed


def test_set_owner_changes_protect_live_and_persistent_and_observe_reads_it_back(
    adapter: LibvirtHost,
    blank_image: BlankImage,
    make_spec: Callable[..., VmSpec],
    local_conn: Any,
    cleanup_domains: list[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    spec = make_spec("web-relabel", blank_image.image)
    cleanup_domains.append(spec.domain)
    adapter.ensure_image(blank_image.image, blank_image.path)
    adapter.create(spec)
    assert observed(adapter, spec.domain) == (DomainState.RUNNING, spec.owner)
    protected = replace(spec.owner, protect=True)

    with caplog.at_level(logging.DEBUG, logger="reconciler.libvirt"):
        adapter.set_owner(spec.domain, protected)

    assert rpcs(caplog) == [
        "virDomainLookupByName",
        "virDomainGetXMLDesc",
        "virDomainIsActive",
        "virDomainSetMetadata",
    ]
    assert observed(adapter, spec.domain) == (DomainState.RUNNING, protected)
    assert persistent_owner(local_conn, spec.domain) == protected
    dom = local_conn.lookupByName(spec.domain)
    raw = dom.metadata(libvirt.VIR_DOMAIN_METADATA_ELEMENT, NAMESPACE, 0)
    assert parse_owner(raw) == protected
    metadata = ET.fromstring(dom.XMLDesc(0)).find("metadata")
    assert metadata is not None and len(metadata) == 1, "rewritten in place, not added"

    dom.destroy()
    assert observed(adapter, spec.domain) == (DomainState.SHUTOFF, protected)

    adapter.set_owner(spec.domain, spec.owner)  # protect off again, on a shut-off domain

    assert observed(adapter, spec.domain) == (DomainState.SHUTOFF, spec.owner)
    adapter.start(spec.domain)
    assert observed(adapter, spec.domain) == (DomainState.RUNNING, spec.owner)
    adapter.delete(spec.domain)


def test_set_owner_refuses_a_foreign_domain_and_another_vms_identity_and_a_missing_one(
    adapter: LibvirtHost,
    blank_image: BlankImage,
    make_spec: Callable[..., VmSpec],
    local_conn: Any,
    cleanup_domains: list[str],
) -> None:
    foreign = "pf-it-foreign-relabel-00000000"
    cleanup_domains.append(foreign)
    xml = ET.Element("domain", {"type": "qemu"})
    ET.SubElement(xml, "name").text = foreign
    ET.SubElement(xml, "memory", {"unit": "MiB"}).text = "64"
    os_el = ET.SubElement(xml, "os")
    ET.SubElement(os_el, "type", {"arch": "x86_64", "machine": "q35"}).text = "hvm"
    local_conn.defineXML(ET.tostring(xml, encoding="unicode"))
    spec = make_spec("web-relabel-2", blank_image.image)
    cleanup_domains.append(spec.domain)
    adapter.ensure_image(blank_image.image, blank_image.path)
    adapter.create(spec)
    before = local_conn.lookupByName(foreign).XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE)

    with pytest.raises(PermanentError, match="carries no proxyfleet metadata"):
        adapter.set_owner(foreign, replace(spec.owner, protect=True))
    with pytest.raises(PermanentError, match="its metadata names"):
        adapter.set_owner(spec.domain, replace(spec.owner, proxy="web-other", protect=True))
    with pytest.raises(NotFoundError):
        adapter.set_owner("pf-it-never-existed-12345678", spec.owner)

    after = local_conn.lookupByName(foreign).XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE)
    assert after == before
    assert observed(adapter, foreign) == (DomainState.SHUTOFF, None)
    assert observed(adapter, spec.domain) == (DomainState.RUNNING, spec.owner)
    adapter.delete(spec.domain)


def test_a_vm_stopped_between_state_check_and_write_gets_its_definition_written(
    adapter: LibvirtHost,
    make_host: Callable[..., LibvirtHost],
    blank_image: BlankImage,
    make_spec: Callable[..., VmSpec],
    local_conn: Any,
    cleanup_domains: list[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    spec = make_spec("web-relabel-3", blank_image.image)
    cleanup_domains.append(spec.domain)
    adapter.ensure_image(blank_image.image, blank_image.path)
    adapter.create(spec)
    observer, armed = after_the_state_check(lambda: local_conn.lookupByName(spec.domain).destroy())
    racing = make_host(observer=observer)
    protected = replace(spec.owner, protect=True)
    armed.set()

    with caplog.at_level(logging.DEBUG, logger="reconciler.libvirt"):
        racing.set_owner(spec.domain, protected)

    assert not armed.is_set(), "the race was not injected"
    assert rpcs(caplog).count("virDomainSetMetadata") == 2
    assert observed(adapter, spec.domain) == (DomainState.SHUTOFF, protected)
    assert persistent_owner(local_conn, spec.domain) == protected
    adapter.delete(spec.domain)


def test_a_vm_started_between_state_check_and_write_gets_its_live_definition_written(
    adapter: LibvirtHost,
    make_host: Callable[..., LibvirtHost],
    blank_image: BlankImage,
    make_spec: Callable[..., VmSpec],
    local_conn: Any,
    cleanup_domains: list[str],
) -> None:
    spec = make_spec("web-relabel-4", blank_image.image)
    cleanup_domains.append(spec.domain)
    adapter.ensure_image(blank_image.image, blank_image.path)
    adapter.create(spec)
    local_conn.lookupByName(spec.domain).destroy()
    observer, armed = after_the_state_check(lambda: local_conn.lookupByName(spec.domain).create())
    racing = make_host(observer=observer)
    protected = replace(spec.owner, protect=True)
    armed.set()

    racing.set_owner(spec.domain, protected)

    assert not armed.is_set(), "the race was not injected"
    assert observed(adapter, spec.domain) == (DomainState.RUNNING, protected)
    assert persistent_owner(local_conn, spec.domain) == protected
    adapter.delete(spec.domain)
