"""The ownership element: written once, read back in every form libvirt returns."""

from __future__ import annotations

import dataclasses
import xml.etree.ElementTree as ET

import pytest

from reconciler.core.render.metadata import (
    ELEMENT,
    NAMESPACE,
    PREFIX,
    owner_element,
    owner_from_domain_xml,
    owner_xml,
    parse_owner,
)
from reconciler.model.inventory import Owner

OWNER = Owner(
    fleet="lab",
    proxy="edge-1",
    digest="0123456789abcdef0123456789abcdef",
    image_key="debian-12",
    image_sha256="a" * 64,
    revision="4b825dc642cb6eb9a060e54bf8d69288fbee4904",
    created="2026-09-04T14:04:00Z",
    protect=True,
)

# What libvirt 9 returns from virDomainGetMetadata: the declaration on the element.
NAMESPACED = (
    '<proxyfleet:instance xmlns:proxyfleet="urn:proxyfleet:instance:v1">'
    "<fleet>lab</fleet><proxy>edge-1</proxy>"
    "<digest>0123456789abcdef0123456789abcdef</digest>"
    f'<image key="debian-12" sha256="{"a" * 64}"/>'
    "<revision>4b825dc642cb6eb9a060e54bf8d69288fbee4904</revision>"
    "<created>2026-09-04T14:04:00Z</created>"
    "<protect>true</protect>"
    "</proxyfleet:instance>"
)
# What libvirt 11.6 returned on the seed's real host: no declaration at all.
BARE = NAMESPACED.replace(' xmlns:proxyfleet="urn:proxyfleet:instance:v1"', "").replace(
    "proxyfleet:instance", "instance"
)
# The same with the prefix left on the tag: an unbound prefix for expat.
PREFIX_WITHOUT_DECLARATION = NAMESPACED.replace(
    ' xmlns:proxyfleet="urn:proxyfleet:instance:v1"', ""
)
# A default-namespace form, as another writer might produce it.
DEFAULT_NAMESPACE = NAMESPACED.replace(
    "<proxyfleet:instance xmlns:proxyfleet=", "<instance xmlns="
).replace("</proxyfleet:instance>", "</instance>")


def test_owner_xml_for_set_metadata_is_bare_because_libvirt_injects_the_namespace() -> None:
    # virXMLInjectNamespace fails when the element already declares the prefix.
    element = ET.fromstring(owner_xml(OWNER))
    assert element.tag == ELEMENT
    assert "xmlns" not in owner_xml(OWNER)


def test_the_embedded_element_declares_our_namespace_on_itself() -> None:
    text = ET.tostring(owner_element(OWNER), encoding="unicode")
    assert ET.fromstring(text).tag == f"{{{NAMESPACE}}}{ELEMENT}"
    assert text.startswith(f'<{PREFIX}:{ELEMENT} xmlns:{PREFIX}="{NAMESPACE}">')
    assert parse_owner(text) == OWNER


def test_owner_xml_round_trips_every_field() -> None:
    assert parse_owner(owner_xml(OWNER)) == OWNER


@pytest.mark.parametrize(
    "xml",
    [NAMESPACED, BARE, PREFIX_WITHOUT_DECLARATION, DEFAULT_NAMESPACE],
    ids=["namespaced", "bare", "prefix-without-declaration", "default-namespace"],
)
def test_metadata_is_decoded_with_and_without_the_namespace_declaration(xml: str) -> None:
    assert parse_owner(xml) == OWNER


def test_the_bare_form_really_has_no_namespace_declaration() -> None:
    # Pins the libvirt 11 shape so the test above cannot silently test the namespaced one twice.
    assert "xmlns" not in BARE
    assert "xmlns" not in PREFIX_WITHOUT_DECLARATION
    assert BARE.startswith("<instance>")


def test_an_xml_declaration_before_the_element_is_tolerated() -> None:
    assert parse_owner('<?xml version="1.0"?>\n' + PREFIX_WITHOUT_DECLARATION) == OWNER


def test_an_instance_element_of_another_namespace_is_foreign() -> None:
    nova = NAMESPACED.replace(
        "urn:proxyfleet:instance:v1", "http://openstack.org/xmlns/libvirt/nova/1.1"
    )
    assert parse_owner(nova) is None


def test_protect_defaults_to_false_and_round_trips() -> None:
    unprotected = Owner(fleet="lab", proxy="p", digest="d")
    assert parse_owner(owner_xml(unprotected)) == unprotected
    assert parse_owner(owner_xml(OWNER)) is not None
    assert parse_owner(owner_xml(OWNER)).protect is True  # type: ignore[union-attr]


def test_the_base_rides_on_the_image_element_and_a_vm_from_before_has_none() -> None:
    based = dataclasses.replace(OWNER, image_base="base-debian-12-aaaaaaaaaaaa.qcow2")
    element = ET.fromstring(owner_xml(based)).find("image")
    assert element is not None and element.get("base") == "base-debian-12-aaaaaaaaaaaa.qcow2"
    assert parse_owner(owner_xml(based)) == based
    assert "base=" not in owner_xml(OWNER)
    assert parse_owner(NAMESPACED) == OWNER and OWNER.image_base == ""


def test_provenance_fields_may_be_missing() -> None:
    xml = "<instance><fleet>lab</fleet><proxy>p</proxy><digest>d</digest></instance>"
    assert parse_owner(xml) == Owner(fleet="lab", proxy="p", digest="d")


@pytest.mark.parametrize(
    "garbage",
    [
        None,
        "",
        "   ",
        "<<<",
        "not xml at all",
        "<instance>",
        "<instance><fleet>lab</fleet><proxy>p</proxy></instance>",
        "<instance><fleet></fleet><proxy>p</proxy><digest>d</digest></instance>",
        "<something><fleet>lab</fleet><proxy>p</proxy><digest>d</digest></something>",
        "<instance/><instance/>",
        "<undeclared:instance><fleet>a</fleet></undeclared:instance>",
        '<!DOCTYPE x [<!ENTITY a "aaaa">]><instance>&a;</instance>',
        "\x00\x01\x02",
    ],
)
def test_malformed_metadata_is_foreign_and_never_raises(garbage: str | None) -> None:
    assert parse_owner(garbage) is None


def _domain(metadata: str) -> str:
    return (
        "<domain type='kvm'><name>pf-lab-edge-1-01234567</name>"
        f"<metadata>{metadata}</metadata><memory unit='KiB'>1</memory></domain>"
    )


def test_owner_is_read_out_of_a_full_domain_xml() -> None:
    other = '<app:thing xmlns:app="urn:other"><fleet>x</fleet></app:thing>'
    assert owner_from_domain_xml(_domain(other + NAMESPACED)) == OWNER


def test_owner_is_read_out_of_a_domain_xml_whose_declaration_was_dropped() -> None:
    assert owner_from_domain_xml(_domain(PREFIX_WITHOUT_DECLARATION)) == OWNER


def test_a_domain_with_only_foreign_metadata_has_no_owner() -> None:
    nova = (
        '<nova:instance xmlns:nova="http://openstack.org/xmlns/libvirt/nova/1.1">'
        "<fleet>lab</fleet><proxy>p</proxy><digest>d</digest></nova:instance>"
    )
    assert owner_from_domain_xml(_domain(nova)) is None
    assert owner_from_domain_xml(_domain("")) is None
    assert owner_from_domain_xml("<domain><name>x</name></domain>") is None


def test_another_fleet_namespace_can_be_asked_for() -> None:
    assert owner_from_domain_xml(_domain(NAMESPACED), fleet_namespace="urn:other") is None


@pytest.mark.parametrize(
    "garbage", ["", "<domain>", "<domain><metadata>&bogus;</metadata></domain>"]
)
def test_an_unparsable_domain_xml_has_no_owner(garbage: str) -> None:
    assert owner_from_domain_xml(garbage) is None
