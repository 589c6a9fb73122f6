"""Box-local settings (the daemon config): small frozen groups, each with units.

The daemon issue extends this module with repo, interval, listen, webhook,
status and log groups; the loader lives in reconciler.core.settings.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, slots=True)
class SshSettings:
    """How the management box reaches its hypervisors."""

    key_file: Path = Path("/etc/proxyfleet/ssh/id_ed25519")
    """Private key; loaded on first use. Missing: transient. Unparsable or group/other-readable: permanent."""
    known_hosts_file: Path = Path("/etc/proxyfleet/ssh/known_hosts")
    """Strictly checked; entries are port-aware (``[host]:2222``)."""
    connect_timeout: float = 10.0
    """Seconds for TCP connect + SSH handshake + auth."""
    call_timeout: float = 60.0
    """Seconds any single libvirt call may take before it is abandoned as transient."""
    keepalive_interval: float = 15.0
    """Seconds between SSH keepalives on an idle connection."""
