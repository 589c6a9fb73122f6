"""Names that land on hypervisors, and images named by URL.

The loader rejects proxies whose domain name would be too long, and the
planner and the engine name domains with the same function, so the rule and
the name cannot drift apart.
"""

from __future__ import annotations

import hashlib
import re

from reconciler.model.fleet import Firmware, Fleet, Image, ImageFormat
from reconciler.model.vm import OVERLAY_SUFFIX, SEED_SUFFIX

MAX_DOMAIN_NAME = 63
"""Longest domain name allowed: it doubles as a DNS label in logs, leases and tooling."""

DIGEST_CHARS = 8
"""How much of a spec digest goes into a domain name."""

URL_IMAGE_PREFIX = "url-"


def domain_name(fleet: str, proxy: str, digest: str, generation: int = 0) -> str:
    """``pf-<fleet>-<proxy>-<digest[:8]>``: the libvirt domain of one proxy VM.

    A VM replaced by self-healing keeps its spec, so its digest: its
    replacement (``generation`` 1, 2, ...) takes 8 other hex digits, those of
    sha256("<digest>:<generation>"), so that both can exist at once.
    """
    if generation == 0:
        return f"pf-{fleet}-{proxy}-{digest[:DIGEST_CHARS]}"
    token = hashlib.sha256(f"{digest}:{generation}".encode()).hexdigest()
    return f"pf-{fleet}-{proxy}-{token[:DIGEST_CHARS]}"


_PROXY_LABEL = r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?"


def volume_domain(fleet: str, volume: str) -> tuple[str, str] | None:
    """``(domain, proxy)`` when ``volume`` is named exactly as the overlay or seed of a VM
    ``domain_name`` can name in ``fleet``; None for any other name (base images too).

    The proxy part must be a DNS label and the digest part 8 lowercase hex
    digits. A fleet whose id is ours plus ``-<more>`` can produce the same
    names; callers that see such a fleet on a host must leave its names alone.
    """
    for suffix in (OVERLAY_SUFFIX, SEED_SUFFIX):
        if volume.endswith(suffix):
            domain = volume.removesuffix(suffix)
            break
    else:
        return None
    pattern = rf"pf-{re.escape(fleet)}-(?P<proxy>{_PROXY_LABEL})-[0-9a-f]{{{DIGEST_CHARS}}}"
    found = re.fullmatch(pattern, domain)
    if found is None or len(domain) > MAX_DOMAIN_NAME:
        return None
    return domain, found.group("proxy")


def domain_name_length(fleet: str, proxy: str) -> int:
    """Length of any domain name of ``proxy`` in ``fleet``, whatever its digest."""
    return len(domain_name(fleet, proxy, "0" * DIGEST_CHARS))


def is_image_url(placement_image: str) -> bool:
    """True when ``placement.image`` names an image by URL rather than by key."""
    return "://" in placement_image


def url_image(url: str) -> Image:
    """The synthetic image for a direct URL: UEFI, qcow2, no checksum.

    Its key is derived from the URL alone, so every run and every host agree
    on the base volume name (``base-url-<12 hex>.qcow2``).
    """
    key = URL_IMAGE_PREFIX + hashlib.sha256(url.encode("utf-8")).hexdigest()[:12]
    return Image(key=key, url=url, sha256=None, format=ImageFormat.QCOW2, firmware=Firmware.UEFI)


def resolve_image(fleet: Fleet, placement_image: str) -> Image | None:
    """The image a proxy's ``placement.image`` names: a key, or an https URL.

    None when the key is unknown or the URL is not https (the loader reports both).
    """
    if is_image_url(placement_image):
        return url_image(placement_image) if placement_image.startswith("https://") else None
    return fleet.image(placement_image)
