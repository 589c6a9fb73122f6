"""Names that land on hypervisors: domains, their volumes, and how long a name may be.

The loader rejects proxies whose domain name would be too long, and the
planner and the engine name domains with the same function, so the rule and
the name cannot drift apart.
"""

from __future__ import annotations

import hashlib
import re

from reconciler.model.vm import OVERLAY_SUFFIX, SEED_SUFFIX

MAX_DOMAIN_NAME = 63
"""Longest domain name allowed: it doubles as a DNS label in logs, leases and tooling."""

DIGEST_CHARS = 8
"""How much of a spec digest goes into a domain name."""


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
