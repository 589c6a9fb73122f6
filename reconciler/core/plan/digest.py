"""The spec digest: one sha256 over exactly what needs a new VM to take effect.

Cloud-init runs once, at first boot, so a VM cannot follow a changed spec: it
has to be replaced. The digest is how the planner notices. It covers, and only
covers (docs/planning.md keeps the operator's copy of this list):

- the resolved image: ``url``, ``sha256``, ``format``, ``firmware``
  (not its key: renaming a key in fleet.yaml replaces nothing);
- the resolved machine type: ``vcpus``, ``memoryMiB``, ``diskGiB``
  (not its key);
- ``cloudInit.userData``, ``vendorData``, ``networkConfig``, exactly as loaded:
  userData from a ``userDataFile`` is that file's text, ``${proxy.*}`` variables
  substituted (reconciler.core.load.variables); ``${secret:NAME}`` references as
  written, not their values;
- for each secret userData references, its fingerprint (a keyed hash of the
  value, reconciler.model.secrets), only when there is one (so that the digests
  of proxies without secrets never changed): a rotated secret rolls the proxies
  that use it, while the digest gives away nothing about the value;
- ``installGuestAgent``;
- the network of the host the VM runs on (``bridge``/``network`` and its name);
- the ``proxyfleet.io/restartedAt`` annotation, only when it is set (so that the
  digests of proxies without it never changed): changing it rolls the proxy;
- ``spec.network`` (address, gateway, nameservers), only when it is set (the same
  reason): the network-config and the pinned MAC it renders are derived from it and
  from names that never change for a proxy.

The network is a property of the *host*, so the digest is computed per
(proxy, host): for an existing VM against the host it runs on, for a new VM
against the host placement chose. A proxy never has "a" digest without a host,
which is why a replacement that lands on another host than its predecessor is
still judged against the network it really plugs into.

Health, labels, lifecycle, placement (zone, pin), and the host's domainType and
cpuMode do not change it: they apply to new VMs only, or to nothing in the guest.

The encoding is canonical JSON (sorted keys, no whitespace, UTF-8) with a
version field, hashed with sha256. Changing the encoding or the field list
changes every digest and so replaces every VM: ``VERSION`` is bumped never
lightly, and tests/test_digest.py pins a known value.
"""

from __future__ import annotations

import hashlib
import json
from typing import Final

from reconciler.core.memo import Table
from reconciler.model import CloudInit, Host, HostNetwork, Image, MachineType, Proxy
from reconciler.model.fleet import FixedAddress

VERSION: Final = 1
"""Bumped only when the canonical encoding changes; bumping it replaces every VM."""

Digests = Table[tuple[object, ...], str]
"""Digests kept across plans by the values they cover (secrets by name and fingerprint
only: no secret's value is kept). Looking one up (hashing its inputs, about 3 us) costs a
fifth of computing it (the canonical JSON and its sha256, about 15-20 us): measured on
the 5,000-proxy plan, 0.23 s of CPU without, 0.13 s with (benchmarks/plan_scale.py)."""


def spec_digest(
    *,
    image: Image,
    machine_type: MachineType,
    cloud_init: CloudInit,
    install_guest_agent: bool,
    network: HostNetwork,
    restarted_at: str = "",
    fixed: FixedAddress | None = None,
) -> str:
    """The sha256 hex digest of the fields listed in the module docstring."""
    return _spec(
        image, machine_type, cloud_init, install_guest_agent, network, restarted_at, fixed, None
    )


def _spec(
    image: Image,
    machine_type: MachineType,
    cloud_init: CloudInit,
    install_guest_agent: bool,
    network: HostNetwork,
    restarted_at: str,
    fixed: FixedAddress | None,
    memo: Digests | None,
) -> str:
    """``spec_digest`` by position: the planner asks once per proxy per plan, and a keyword
    call costs it a third more. ``memo``: digests of earlier plans, by what they cover."""
    secrets = cloud_init.secrets
    covered = (
        image,
        machine_type,
        cloud_init.user_data,
        cloud_init.vendor_data,
        cloud_init.network_config,
        tuple((s.name, s.fingerprint) for s in secrets) if secrets else (),
        install_guest_agent,
        network,
        restarted_at,
        fixed,
    )
    if memo is None:
        return _digest(*covered)
    return memo.get(covered, lambda: _digest(*covered))


def _digest(
    image: Image,
    machine_type: MachineType,
    user_data: str,
    vendor_data: str | None,
    network_config: str | None,
    fingerprints: tuple[tuple[str, str], ...],
    install_guest_agent: bool,
    network: HostNetwork,
    restarted_at: str,
    fixed: FixedAddress | None,
) -> str:
    document: dict[str, object] = {
        "v": VERSION,
        "image": {
            "url": image.url,
            "sha256": image.sha256,
            "format": image.format.value,
            "firmware": image.firmware.value,
        },
        "machineType": {
            "vcpus": machine_type.vcpus,
            "memoryMiB": machine_type.memory_mib,
            "diskGiB": machine_type.disk_gib,
        },
        "cloudInit": {
            "userData": user_data,
            "vendorData": vendor_data,
            "networkConfig": network_config,
        },
        "installGuestAgent": install_guest_agent,
        "network": {"kind": network.kind, "name": network.name},
    }
    if restarted_at:
        document["restartedAt"] = restarted_at
    if fixed is not None:
        document["fixedAddress"] = {
            "address": fixed.address,
            "gateway": fixed.gateway,
            "nameservers": list(fixed.nameservers),
        }
    if fingerprints:
        document["secrets"] = dict(fingerprints)
    encoded = json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(encoded.encode("utf-8")).hexdigest()


def proxy_digest(
    proxy: Proxy,
    host: Host,
    *,
    image: Image,
    machine_type: MachineType,
    memo: Digests | None = None,
) -> str:
    """The digest ``proxy`` has on ``host``, with its image and machine type already resolved.

    ``image`` is the resolved ``placement.image`` (a key of ``spec.images`` or a
    synthetic image for a direct URL), ``machine_type`` the resolved
    ``placement.machineType``: the planner resolves both once per proxy. ``memo``
    keeps digests across plans (the daemon plans the same proxies every cycle).
    """
    return _spec(
        image,
        machine_type,
        proxy.cloud_init,
        proxy.install_guest_agent,
        host.network,
        proxy.restarted_at,
        proxy.network,
        memo,
    )
