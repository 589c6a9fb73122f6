"""The ownership element: how a libvirt domain says which fleet it belongs to.

A domain belongs to this fleet only if its ``<metadata>`` carries our element
with this fleet's id (DESIGN.md, Ownership). The element looks like::

    <proxyfleet:instance xmlns:proxyfleet="urn:proxyfleet:instance:v1">
      <fleet>lab</fleet>
      <proxy>edge-1</proxy>
      <digest>0123abcd...</digest>
      <image key="debian-12" sha256="..." base="base-debian-12-0123456789ab.qcow2"/>
      <revision>4b825dc6...</revision>
      <created>2026-09-04T14:04:00Z</created>
      <protect>false</protect>
    </proxyfleet:instance>

It is embedded in the domain XML at definition time (``owner_element``), or
written with ``virDomainSetMetadata(VIR_DOMAIN_METADATA_ELEMENT,
owner_xml(owner), PREFIX, NAMESPACE)``. The latter takes the *bare* element:
libvirt injects the namespace itself and fails ("failed to add new XML
namespace") when the element already declares the prefix.

Reading is lenient on purpose. libvirt 11 hands the element back from
``virDomainGetMetadata`` without its namespace declaration (the seed's third
real-host bug), sometimes with the prefix still on the tag, which a
namespace-aware parser rejects as an unbound prefix. So the element and its
children are matched by *local name*; an element that does carry a namespace
must carry ours (nova's ``<nova:instance>`` has the same local name). Anything
that does not parse or lacks fleet/proxy/digest is foreign: ``None``, never an
exception, because one odd domain must not stop an inventory.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Iterator

from reconciler.model.inventory import Owner

NAMESPACE = "urn:proxyfleet:instance:v1"
PREFIX = "proxyfleet"
ELEMENT = "instance"

# Children are unqualified: libvirt keeps (and sanitises) only the namespace of
# the direct child of <metadata>, so the root element alone carries it.
_TEXT_FIELDS = ("fleet", "proxy", "digest", "revision", "created", "protect")
# protect errs on the safe side: any spelling of yes protects.
_TRUE = frozenset({"true", "1", "yes", "on"})


def owner_xml(owner: Owner) -> str:
    """The bare element for ``virDomainSetMetadata`` (with key PREFIX, uri NAMESPACE)."""
    return ET.tostring(_build(owner, ELEMENT, {}), encoding="unicode")


def owner_element(owner: Owner) -> ET.Element:
    """The element as an ElementTree node, for embedding in a domain's ``<metadata>``.

    The tag is written with a literal prefix and its own ``xmlns:`` attribute
    rather than as ``{uri}instance``: ElementTree would hoist the declaration to
    the document root, and libvirt keeps only metadata children that carry a
    namespace of their own.
    """
    return _build(owner, f"{PREFIX}:{ELEMENT}", {f"xmlns:{PREFIX}": NAMESPACE})


def _build(owner: Owner, tag: str, attrib: dict[str, str]) -> ET.Element:
    root = ET.Element(tag, attrib)
    ET.SubElement(root, "fleet").text = owner.fleet
    ET.SubElement(root, "proxy").text = owner.proxy
    ET.SubElement(root, "digest").text = owner.digest
    image = {"key": owner.image_key, "sha256": owner.image_sha256}
    if owner.image_base:
        image["base"] = owner.image_base
    ET.SubElement(root, "image", image)
    ET.SubElement(root, "revision").text = owner.revision
    ET.SubElement(root, "created").text = owner.created
    ET.SubElement(root, "protect").text = "true" if owner.protect else "false"
    return root


def parse_owner(xml: str | None) -> Owner | None:
    """Decode the element as ``virDomainGetMetadata`` returns it; None if foreign.

    Accepts the namespaced form, the bare form (no declaration) and the
    prefixed form whose declaration was dropped. Nothing is remembered here: the
    host adapter keeps each observed domain, its owner decoded, for as long as its
    owner text and state stay the same (reconciler.adapters.hypervisor.observe.hostobserve).
    """
    if not xml or not xml.strip():
        return None
    root = _parse_fragment(xml)
    if root is None or not _is_ours(root, NAMESPACE):
        return None
    return _owner_from_element(root)


def owner_from_domain_xml(domain_xml: str, fleet_namespace: str = NAMESPACE) -> Owner | None:
    """Find and decode the element inside a full domain XML (one XMLDesc per domain)."""
    if not domain_xml:
        return None
    root = _parse_fragment(domain_xml)
    if root is None:
        return None
    for metadata in _children(root, "metadata"):
        for candidate in _children(metadata, ELEMENT):
            if _is_ours(candidate, fleet_namespace):
                owner = _owner_from_element(candidate)
                if owner is not None:
                    return owner
    return None


def _parse_fragment(xml: str) -> ET.Element | None:
    try:
        return ET.fromstring(xml)
    except ET.ParseError:
        pass
    # The prefix without its declaration ("unbound prefix"): declare it on a
    # wrapper so the same text parses. Other garbage still fails below.
    # A leading XML declaration cannot sit inside the wrapper, so drop it.
    body = xml.lstrip()
    if body.startswith("<?xml"):
        end = body.find("?>")
        body = body[end + 2 :] if end >= 0 else body
    wrapped = f'<wrapper xmlns:{PREFIX}="{NAMESPACE}">{body}</wrapper>'
    try:
        wrapper = ET.fromstring(wrapped)
    except ET.ParseError:
        return None
    elements = list(wrapper)
    if len(elements) != 1 or (wrapper.text or "").strip() or (elements[0].tail or "").strip():
        return None
    return elements[0]


def _split(tag: object) -> tuple[str | None, str]:
    """(namespace or None, local name) of an ElementTree tag; comments have none."""
    if not isinstance(tag, str):
        return None, ""
    if tag.startswith("{"):
        uri, _, local = tag[1:].partition("}")
        return uri, local
    return None, tag.rpartition(":")[2]


def _is_ours(element: ET.Element, namespace: str) -> bool:
    uri, local = _split(element.tag)
    return local == ELEMENT and uri in (None, namespace)


def _children(element: ET.Element, local: str) -> Iterator[ET.Element]:
    return (child for child in element if _split(child.tag)[1] == local)


def _owner_from_element(root: ET.Element) -> Owner | None:
    first: dict[str, ET.Element] = {}  # one pass: observe parses one element per domain
    for child in root:
        first.setdefault(_split(child.tag)[1], child)
    values = {
        name: (first[name].text or "").strip() if name in first else "" for name in _TEXT_FIELDS
    }
    if not (values["fleet"] and values["proxy"] and values["digest"]):
        return None
    image = first.get("image")
    image_key = image.get("key", "") if image is not None else ""
    image_sha = image.get("sha256", "") if image is not None else ""
    image_base = image.get("base", "") if image is not None else ""
    return Owner(
        fleet=values["fleet"],
        proxy=values["proxy"],
        digest=values["digest"],
        image_key=image_key,
        image_sha256=image_sha,
        revision=values["revision"],
        created=values["created"],
        protect=values["protect"].lower() in _TRUE,
        image_base=image_base,
    )
