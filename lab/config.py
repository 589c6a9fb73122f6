"""Where the lab keeps its state and how it numbers its hosts and networks.

Every address the lab uses lies in 10.77.0.0/16 (host uplinks), 10.78.0.0/16 (guest
bridges), 10.80.0.0/16 (each host's libvirt network ``labnet``) and 10.79.0.1 (the probe
address every host namespace answers on); these ranges exist only inside this machine: the
root namespace routes each guest subnet to its host's veth, and the host namespaces have no
default route, so nothing a guest sends leaves the lab.
The probe listens on port 80 because squid configs commonly allow only ports 80 and 443.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

LAB_DIR = Path(__file__).resolve().parent
INSTANCE = int(os.environ.get("PROXYFLEET_LAB_INSTANCE", "0"))
"""Several labs may run side by side (tests, benchmarks, the demo): instance k numbers
its hosts k*10+1 .. k*10+10, so names, veths, addresses and routes never collide (host 10
of instance k is k*10+10, below instance k+1's first host, k*10+11)."""
MAX_INSTANCE = 24
"""Instance 24's hosts are 241..250: the last that fit an address octet (10.77.<g>.2)."""
if not 0 <= INSTANCE <= MAX_INSTANCE:
    raise SystemExit(f"PROXYFLEET_LAB_INSTANCE must be 0..{MAX_INSTANCE}")
HOST_BASE = INSTANCE * 10
_DEFAULT_STATE = LAB_DIR / ("state" if INSTANCE == 0 else f"state-{INSTANCE}")
STATE = Path(os.environ.get("PROXYFLEET_LAB_STATE", _DEFAULT_STATE)).resolve()
SSH_DIR = STATE / "ssh"
KEY_FILE = SSH_DIR / "id_ed25519"
KNOWN_HOSTS = SSH_DIR / "known_hosts"
AUTHORIZED_KEYS = SSH_DIR / "authorized_keys"
HOSTKEY_DIR = SSH_DIR / "hostkeys"
HOSTS_DIR = STATE / "hosts"
HOSTS_YAML = STATE / "hosts.yaml"
IMAGES_YAML = STATE / "images.yaml"
LAB_JSON = STATE / "lab.json"
IMAGES_DIR = Path(os.environ.get("PROXYFLEET_LAB_IMAGES", LAB_DIR / "state" / "images")).resolve()
"""Shared by every instance: the image is built once per recipe."""
IMAGE_SERVER_PID = STATE / "image-server.pid"
IMAGE_PORT = int(os.environ.get("PROXYFLEET_LAB_IMAGE_PORT", str(18787 + INSTANCE)))
PROBE_ADDRESS = "10.79.0.1"
PROBE_PORT = 80
PROBE_URL = f"http://{PROBE_ADDRESS}/generate_204"
NETNS_PREFIX = "pfhost"
LIBVIRT_NETWORK = "labnet"
"""The libvirt network (forward mode ``open``, DHCP by libvirt's own dnsmasq) on every host
that is not ``--light``: ``network: {network: labnet}`` in a fleet's host entry."""
MAX_HOSTS = 10


@dataclass(frozen=True)
class HostLayout:
    """Names and addresses of lab host number ``n`` (1-based, within this instance)."""

    n: int

    @property
    def g(self) -> int:
        """The machine-wide host number: unique across lab instances."""
        return HOST_BASE + self.n

    @classmethod
    def from_name(cls, name: str) -> HostLayout | None:
        """The layout of ``pfhost<g>`` if it belongs to this instance, else None."""
        suffix = name.removeprefix(NETNS_PREFIX)
        if not name.startswith(NETNS_PREFIX) or not suffix.isdigit():
            return None
        n = int(suffix) - HOST_BASE
        return cls(n) if 1 <= n <= MAX_HOSTS else None

    @property
    def name(self) -> str:
        return f"{NETNS_PREFIX}{self.g}"

    @property
    def netns(self) -> str:
        return self.name

    @property
    def veth_root(self) -> str:
        """The root-namespace end of the uplink (the other end is ``uplink`` inside)."""
        return self.name

    @property
    def root_address(self) -> str:
        return f"10.77.{self.g}.1"

    @property
    def address(self) -> str:
        """The host's SSH address, as the management box dials it."""
        return f"10.77.{self.g}.2"

    @property
    def guest_subnet(self) -> str:
        return f"10.78.{self.g}.0/24"

    @property
    def bridge_address(self) -> str:
        return f"10.78.{self.g}.1"

    @property
    def bridge_mac(self) -> str:
        """br0's own MAC, fixed (locally administered, one per host machine-wide). Left to
        the kernel, a bridge with only guests' taps as ports takes the lowest tap's MAC;
        when that guest goes, the bridge's MAC changes and the kernel flushes its ARP
        table, so an agentless guest's address is unknown until it next speaks (seen on
        the lab 2026-12-07: test_e2e_apply's replace, when the old VM's tap had the lower
        MAC). A real host's bridge keeps its physical port's MAC, or a set one."""
        return f"02:70:66:00:{self.g // 256:02x}:{self.g % 256:02x}"

    @property
    def dhcp_range(self) -> tuple[str, str]:
        return f"10.78.{self.g}.10", f"10.78.{self.g}.250"

    @property
    def network_subnet(self) -> str:
        """The subnet of the host's libvirt network ``labnet``."""
        return f"10.80.{self.g}.0/24"

    @property
    def network_address(self) -> str:
        """The host's address on ``labnet`` (its bridge ``labnet0``), the guests' gateway."""
        return f"10.80.{self.g}.1"

    @property
    def network_dhcp_range(self) -> tuple[str, str]:
        return f"10.80.{self.g}.10", f"10.80.{self.g}.250"

    @property
    def zone(self) -> str:
        return "zone-a" if self.n % 2 else "zone-b"

    @property
    def state(self) -> Path:
        return HOSTS_DIR / self.name

    @property
    def leases(self) -> Path:
        """dnsmasq's lease file: every address the host's guests were given."""
        return self.state / "dnsmasq.leases"

    @property
    def hostkey(self) -> Path:
        return HOSTKEY_DIR / f"{self.name}_ed25519"

    @property
    def holder_pid_file(self) -> Path:
        return self.state / "holder.pid"
