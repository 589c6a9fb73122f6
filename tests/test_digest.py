"""The spec digest covers exactly the fields that need a new VM, and nothing else."""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Callable

import pytest

from reconciler.core.plan.digest import proxy_digest, spec_digest
from reconciler.model import (
    CloudInit,
    DomainType,
    Firmware,
    Fleet,
    HealthCheck,
    Host,
    HostNetwork,
    Image,
    ImageFormat,
    Lifecycle,
    MachineType,
    Placement,
    Policy,
    Proxy,
)
from reconciler.model.secrets import SecretValue

IMAGE = Image(key="debian", url="https://images.example/debian.qcow2", sha256="ab" * 32)
SMALL = MachineType(key="small", vcpus=1, memory_mib=1024, disk_gib=10)
HOST = Host(name="kvm01", address="10.0.0.1", zone="a", network=HostNetwork("bridge", "br0"))
FLEET = Fleet(name="home", images=(IMAGE,), machine_types=(SMALL,), hosts=(HOST,))
PROXY = Proxy(
    name="web-1",
    placement=Placement(zone="a", image="debian", machine_type="small"),
    cloud_init=CloudInit(user_data="#cloud-config\npackages: [squid]\n"),
)

# Pinned: a change here changes every VM's digest, which replaces every VM in every fleet.
KNOWN_DIGEST = "3aefeef99ffc1ccd0eab1a8af350f6130e1d6e4c95f6fce3c7fa3364c7d3b155"


def digest(
    fleet: Fleet = FLEET, proxy: Proxy = PROXY, host: Host = HOST, image: Image = IMAGE
) -> str:
    machine_type = fleet.machine_type(proxy.placement.machine_type)
    assert machine_type is not None
    return proxy_digest(proxy, host, image=image, machine_type=machine_type)


def test_the_digest_of_a_known_spec_never_changes_by_accident() -> None:
    assert digest() == KNOWN_DIGEST


def test_the_digest_is_sha256_hex() -> None:
    value = digest()
    assert len(value) == 64
    assert set(value) <= set("0123456789abcdef")


def _ci(**changes: str | None) -> Callable[[Proxy], Proxy]:
    return lambda p: dataclasses.replace(p, cloud_init=dataclasses.replace(p.cloud_init, **changes))


PROXY_CHANGES_THAT_REPLACE: dict[str, Callable[[Proxy], Proxy]] = {
    "userData": _ci(user_data="#cloud-config\npackages: [squid, curl]\n"),
    "userData trailing newline": _ci(user_data="#cloud-config\npackages: [squid]"),
    "userData CRLF": _ci(user_data="#cloud-config\r\npackages: [squid]\r\n"),
    "vendorData": _ci(vendor_data="#!/bin/sh\ntrue\n"),
    "networkConfig": _ci(network_config="version: 2\n"),
    "installGuestAgent": lambda p: dataclasses.replace(p, install_guest_agent=False),
}


@pytest.mark.parametrize(
    "change", PROXY_CHANGES_THAT_REPLACE.values(), ids=list(PROXY_CHANGES_THAT_REPLACE)
)
def test_a_change_to_cloud_init_or_the_agent_changes_the_digest(
    change: Callable[[Proxy], Proxy],
) -> None:
    assert digest(proxy=change(PROXY)) != digest()


IMAGE_CHANGES_THAT_REPLACE: dict[str, Image] = {
    "url": dataclasses.replace(IMAGE, url="https://images.example/debian-13.qcow2"),
    "sha256": dataclasses.replace(IMAGE, sha256="cd" * 32),
    "sha256 removed": dataclasses.replace(IMAGE, sha256=None),
    "format": dataclasses.replace(IMAGE, format=ImageFormat.RAW),
    "firmware": dataclasses.replace(IMAGE, firmware=Firmware.BIOS),
}


@pytest.mark.parametrize(
    "image", IMAGE_CHANGES_THAT_REPLACE.values(), ids=list(IMAGE_CHANGES_THAT_REPLACE)
)
def test_a_change_to_the_resolved_image_changes_the_digest(image: Image) -> None:
    assert digest(image=image) != digest()


@pytest.mark.parametrize(
    "machine_type",
    [
        dataclasses.replace(SMALL, vcpus=2),
        dataclasses.replace(SMALL, memory_mib=2048),
        dataclasses.replace(SMALL, disk_gib=20),
    ],
    ids=["vcpus", "memoryMiB", "diskGiB"],
)
def test_a_change_to_the_machine_type_values_changes_the_digest(machine_type: MachineType) -> None:
    fleet = dataclasses.replace(FLEET, machine_types=(machine_type,))
    assert digest(fleet=fleet) != digest()


@pytest.mark.parametrize(
    "network",
    [HostNetwork("bridge", "br1"), HostNetwork("network", "br0")],
    ids=["name", "kind"],
)
def test_a_change_to_the_hosts_network_changes_the_digest(network: HostNetwork) -> None:
    assert digest(host=dataclasses.replace(HOST, network=network)) != digest()


SAME_VM: dict[str, Callable[[], str]] = {
    "health": lambda: digest(
        proxy=dataclasses.replace(PROXY, health=HealthCheck(proxy_port=8080, expect_status=200))
    ),
    "labels": lambda: digest(proxy=dataclasses.replace(PROXY, labels=(("team", "web"),))),
    "lifecycle.protect": lambda: digest(
        proxy=dataclasses.replace(PROXY, lifecycle=Lifecycle(protect=True))
    ),
    "placement zone and pin": lambda: digest(
        proxy=dataclasses.replace(
            PROXY, placement=dataclasses.replace(PROXY.placement, zone="b", host="kvm09")
        )
    ),
    "proxy name": lambda: digest(proxy=dataclasses.replace(PROXY, name="web-2")),
    "image key": lambda: digest(image=dataclasses.replace(IMAGE, key="debian-12")),
    "machine type key": lambda: digest(
        fleet=dataclasses.replace(FLEET, machine_types=(dataclasses.replace(SMALL, key="s"),)),
        proxy=dataclasses.replace(
            PROXY, placement=dataclasses.replace(PROXY.placement, machine_type="s")
        ),
    ),
    "host name, address, zone, domainType, cpuMode, maxProxies": lambda: digest(
        host=dataclasses.replace(
            HOST,
            name="kvm02",
            address="10.0.0.2",
            zone="b",
            domain_type=DomainType.QEMU,
            cpu_mode="none",
            max_proxies=3,
        )
    ),
    "fleet name and policy": lambda: digest(
        fleet=dataclasses.replace(FLEET, name="office", policy=Policy(prune=True, suspend=True))
    ),
}


@pytest.mark.parametrize("variant", SAME_VM.values(), ids=list(SAME_VM))
def test_fields_outside_the_list_do_not_change_the_digest(variant: Callable[[], str]) -> None:
    assert variant() == digest()


def test_spec_digest_and_proxy_digest_agree() -> None:
    assert digest() == spec_digest(
        image=IMAGE,
        machine_type=SMALL,
        cloud_init=PROXY.cloud_init,
        install_guest_agent=True,
        network=HOST.network,
    )


def test_non_ascii_user_data_is_hashed_as_utf8_and_differs_from_its_escape() -> None:
    plain = digest(proxy=_ci(user_data="# café\n")(PROXY))
    escaped = digest(proxy=_ci(user_data="# caf\\u00e9\n")(PROXY))
    assert plain != escaped


def test_the_encoding_is_versioned_sorted_compact_json() -> None:
    text = (
        '{"cloudInit":{"networkConfig":null,"userData":"#cloud-config\\npackages: [squid]\\n",'
        '"vendorData":null},"image":{"firmware":"uefi","format":"qcow2",'
        '"sha256":"' + "ab" * 32 + '","url":"https://images.example/debian.qcow2"},'
        '"installGuestAgent":true,"machineType":{"diskGiB":10,"memoryMiB":1024,"vcpus":1},'
        '"network":{"kind":"bridge","name":"br0"},"v":1}'
    )
    assert digest() == hashlib.sha256(text.encode()).hexdigest()


def test_a_rotated_secret_changes_the_digest_after_the_old_one_was_remembered() -> None:
    def with_secret(value: str, fingerprint: str) -> str:
        cloud_init = dataclasses.replace(
            PROXY.cloud_init, secrets=(SecretValue("token", value, fingerprint),)
        )
        return digest(proxy=dataclasses.replace(PROXY, cloud_init=cloud_init))

    first = with_secret("old", "f" * 64)
    assert with_secret("old", "f" * 64) == first  # remembered
    assert with_secret("new", "e" * 64) != first
    assert with_secret("other value, same fingerprint", "f" * 64) == first, (
        "the digest covers the fingerprint, never the value"
    )


def test_a_remembered_digest_equals_one_computed_from_equal_values_built_anew() -> None:
    remembered = digest()
    rebuilt = Proxy(
        name="web-1",
        placement=Placement(zone="a", image="debian", machine_type="small"),
        cloud_init=CloudInit(user_data="#cloud-config\npackages: [squid]\n"),
    )
    assert digest(proxy=rebuilt) == remembered == KNOWN_DIGEST
