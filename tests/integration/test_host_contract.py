"""One contract, two hypervisors: the same cases against the fake host and the real one.

``FakeHypervisor`` stands in for ``LibvirtHost`` in every executor and engine unit test,
so a rule that drifts between them makes those tests prove the wrong thing. Each case
here runs twice: against the fake, and against a real libvirtd through a real sshd (the
integration fixtures). Setup that is not part of the seam (a foreign domain, a stray
volume, stopping a VM behind proxyfleet's back) goes through a small ``Backend`` per side.
"""

from __future__ import annotations

import dataclasses
import secrets
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import pytest
from hostservices import BlankImage

from reconciler.adapters.hypervisor.fakehost import FakeHypervisor
from reconciler.adapters.hypervisor.libvirthost import LibvirtHost
from reconciler.errors import NotFoundError, PermanentError
from reconciler.model import DomainState, Owner
from reconciler.model.vm import VmSpec, base_marker_name, base_volume_name, vm_volumes
from reconciler.ports.hypervisor import Hypervisor

pytestmark = pytest.mark.filterwarnings("error::pytest.PytestUnhandledThreadExceptionWarning")


class Backend(Protocol):
    hv: Hypervisor

    def foreign(self, name: str, *, disk: str | None = None) -> None:
        """A domain someone else made (no proxyfleet metadata), its disk the pool volume
        ``disk`` when given."""

    def volume(self, name: str) -> None:
        """A small volume in the host's pool that no domain uses."""

    def stop(self, name: str) -> None:
        """Shut a domain off behind proxyfleet's back."""


class FakeBackend:
    def __init__(self) -> None:
        self.fake = FakeHypervisor("it1")
        self.hv: Hypervisor = self.fake

    def foreign(self, name: str, *, disk: str | None = None) -> None:
        self.fake.add_domain(name, DomainState.SHUTOFF)
        if disk is not None:
            self.fake.add_volumes(disk, used_by=name)

    def volume(self, name: str) -> None:
        self.fake.add_volumes(name)

    def stop(self, name: str) -> None:
        self.fake.set_state(name, DomainState.SHUTOFF)


class RealBackend:
    def __init__(self, hv: LibvirtHost, conn: Any, pool: Any, cleanup: list[str]) -> None:
        self.hv: Hypervisor = hv
        self.conn = conn
        self.pool = pool
        self.cleanup = cleanup

    def foreign(self, name: str, *, disk: str | None = None) -> None:
        self.cleanup.append(name)
        dom = ET.Element("domain", {"type": "qemu"})
        ET.SubElement(dom, "name").text = name
        ET.SubElement(dom, "memory", {"unit": "MiB"}).text = "64"
        ET.SubElement(ET.SubElement(dom, "os"), "type", {"arch": "x86_64"}).text = "hvm"
        if disk is not None:
            self.volume(disk)
            path = self.pool.storageVolLookupByName(disk).path()
            devices = ET.SubElement(dom, "devices")
            element = ET.SubElement(devices, "disk", {"type": "file", "device": "disk"})
            ET.SubElement(element, "driver", {"name": "qemu", "type": "raw"})
            ET.SubElement(element, "source", {"file": path})
            ET.SubElement(element, "target", {"dev": "vda", "bus": "virtio"})
        self.conn.defineXML(ET.tostring(dom, encoding="unicode"))

    def volume(self, name: str) -> None:
        xml = (
            f"<volume><name>{name}</name><capacity unit='KiB'>4</capacity>"
            "<target><format type='raw'/></target></volume>"
        )
        self.pool.createXML(xml, 0)

    def stop(self, name: str) -> None:
        self.conn.lookupByName(name).destroy()


@pytest.fixture(params=["fake", "real"])
def side(
    request: pytest.FixtureRequest,
    adapter: LibvirtHost,
    local_conn: Any,
    pool: tuple[str, Path],
    cleanup_domains: list[str],
) -> Backend:
    if request.param == "fake":
        return FakeBackend()
    return RealBackend(
        adapter, local_conn, local_conn.storagePoolLookupByName(pool[0]), cleanup_domains
    )


@pytest.fixture
def vm(
    side: Backend,
    blank_image: BlankImage,
    make_spec: Callable[..., VmSpec],
    cleanup_domains: list[str],
) -> Callable[[str], VmSpec]:
    """Make a VM of proxy NAME on the side under test (its base image ensured first)."""

    def make(proxy: str) -> VmSpec:
        spec = make_spec(f"{proxy}-{secrets.token_hex(2)}", blank_image.image)
        cleanup_domains.append(spec.domain)
        side.hv.ensure_image(blank_image.image, blank_image.path)
        side.hv.create(spec)
        return spec

    return make


def observed(hv: Hypervisor) -> dict[str, Any]:
    return {d.name: d for d in hv.observe().domains}


def test_contract_a_created_vm_is_observed_owned_and_running_with_its_volumes(
    side: Backend, vm: Callable[[str], VmSpec], blank_image: BlankImage
) -> None:
    spec = vm("web")

    inventory = side.hv.observe()

    seen = {d.name: d for d in inventory.domains}[spec.domain]
    assert (seen.state, seen.owner) == (DomainState.RUNNING, spec.owner)
    base = base_volume_name(blank_image.image)
    assert {*vm_volumes(spec.domain), base, base_marker_name(base)} <= set(inventory.volumes)


def test_contract_create_again_keeps_one_vm_and_starts_it_when_stopped(
    side: Backend, vm: Callable[[str], VmSpec]
) -> None:
    spec = vm("again")
    side.stop(spec.domain)
    assert observed(side.hv)[spec.domain].state is DomainState.SHUTOFF

    side.hv.create(spec)

    assert observed(side.hv)[spec.domain].state is DomainState.RUNNING
    assert sum(1 for name in observed(side.hv) if name == spec.domain) == 1


def test_contract_start_brings_back_a_vm_stopped_behind_proxyfleets_back_and_keeps_one_running(
    side: Backend, vm: Callable[[str], VmSpec]
) -> None:
    spec, running = vm("start"), vm("running")
    side.stop(spec.domain)

    side.hv.start(spec.domain)
    side.hv.start(running.domain)

    assert observed(side.hv)[spec.domain].state is DomainState.RUNNING
    assert observed(side.hv)[running.domain].state is DomainState.RUNNING


def test_contract_delete_removes_the_vm_and_its_volumes_and_deleting_again_is_fine(
    side: Backend, vm: Callable[[str], VmSpec]
) -> None:
    spec = vm("gone")

    side.hv.delete(spec.domain)
    side.hv.delete(spec.domain)

    inventory = side.hv.observe()
    assert spec.domain not in {d.name for d in inventory.domains}
    assert not set(vm_volumes(spec.domain)) & set(inventory.volumes)


def test_contract_a_foreign_domain_is_listed_without_owner_and_never_deleted_or_relabelled(
    side: Backend,
) -> None:
    name = f"pf-it-foreign-{secrets.token_hex(3)}"
    side.foreign(name)

    assert observed(side.hv)[name].owner is None
    with pytest.raises(PermanentError):
        side.hv.delete(name)
    with pytest.raises(PermanentError):
        side.hv.set_owner(name, Owner("it", "x", "0" * 64))
    assert name in observed(side.hv)


def test_contract_a_missing_domain_is_not_found_for_start_set_owner_and_addresses(
    side: Backend,
) -> None:
    missing = f"pf-it-missing-{secrets.token_hex(3)}"

    with pytest.raises(NotFoundError):
        side.hv.start(missing)
    with pytest.raises(NotFoundError):
        side.hv.set_owner(missing, Owner("it", "x", "0" * 64))
    with pytest.raises(NotFoundError):
        side.hv.addresses(missing)


def test_contract_remove_volumes_deletes_unused_leftovers_and_refuses_ones_in_use(
    side: Backend,
) -> None:
    free = f"pf-it-left-{secrets.token_hex(3)}"
    used = f"pf-it-used-{secrets.token_hex(3)}"
    side.volume(vm_volumes(free)[0])
    side.foreign(f"rescue-{secrets.token_hex(3)}", disk=vm_volumes(used)[0])

    removed = side.hv.remove_volumes(free, vm_volumes(free))
    with pytest.raises(PermanentError):
        side.hv.remove_volumes(used, vm_volumes(used))

    volumes = set(side.hv.observe().volumes)
    assert removed == (vm_volumes(free)[0],)
    assert vm_volumes(free)[0] not in volumes
    assert vm_volumes(used)[0] in volumes


def test_contract_an_unused_base_goes_and_one_under_an_overlay_stays(
    side: Backend, vm: Callable[[str], VmSpec], blank_image: BlankImage
) -> None:
    base = base_volume_name(blank_image.image)
    spec = vm("base")

    kept = side.hv.remove_unused_base(base)
    assert base in side.hv.observe().volumes and not kept

    side.hv.delete(spec.domain)
    removed = side.hv.remove_unused_base(base)

    volumes = set(side.hv.observe().volumes)
    assert set(removed) == {base, base_marker_name(base)}
    assert not {base, base_marker_name(base)} & volumes


def test_contract_deleting_a_domain_that_never_existed_is_fine(side: Backend) -> None:
    never = f"pf-it-never-{secrets.token_hex(3)}"

    side.hv.delete(never)

    assert never not in observed(side.hv)


def test_contract_set_owner_writes_a_changed_label_and_refuses_another_proxys_owner(
    side: Backend, vm: Callable[[str], VmSpec]
) -> None:
    spec = vm("label")
    protected = dataclasses.replace(spec.owner, protect=True)

    side.hv.set_owner(spec.domain, protected)
    with pytest.raises(PermanentError):
        side.hv.set_owner(spec.domain, dataclasses.replace(spec.owner, proxy="someone-else"))

    assert observed(side.hv)[spec.domain].owner == protected


def test_contract_a_shut_off_vm_has_no_addresses(
    side: Backend, vm: Callable[[str], VmSpec]
) -> None:
    spec = vm("off")
    side.stop(spec.domain)

    assert side.hv.addresses(spec.domain) == ()
