"""The network-config of a fixed-address proxy: cloud-init's network-config version 2.

One ethernet, matched by the MAC every VM of the proxy gets (``guest_mac``: derived
from the fleet's and the proxy's names), renamed ``eth0``, with the address, the
gateway (``gateway4``/``gateway6``) and the nameservers of ``spec.network``; no DHCP. The MAC
match is what makes the config hold whatever name the guest's kernel gives the NIC.

JSON is valid YAML and needs no quoting rules of its own (as meta-data is written).
"""

from __future__ import annotations

import ipaddress
import json

from reconciler.model.fleet import FixedAddress

INTERFACE = "eth0"


def network_config(network: FixedAddress, *, mac: str) -> bytes:
    """The seed's ``network-config`` for ``network`` on the NIC with ``mac``."""
    interface = ipaddress.ip_interface(network.address)
    ethernet: dict[str, object] = {
        "match": {"macaddress": mac},
        "set-name": INTERFACE,
        "dhcp4": False,
        "dhcp6": False,
        "addresses": [str(interface)],
    }
    if network.gateway is not None:
        # gateway4/gateway6, not a default route under "routes": cloud-init's ENI renderer
        # (Debian 12's cloud-init 22.4) turns routes into "post-up route add ...", and
        # Debian images have no net-tools "route", so the guest came up without a default
        # route (seen in the lab); a gateway is the iface's own "gateway" line.
        ethernet[f"gateway{interface.version}"] = network.gateway
    if network.nameservers:
        ethernet["nameservers"] = {"addresses": list(network.nameservers)}
    document = {"version": 2, "ethernets": {INTERFACE: ethernet}}
    return (json.dumps(document, indent=2) + "\n").encode("utf-8")
