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


@dataclass(frozen=True, slots=True)
class ApplySettings:
    """How the engine carries out a plan and checks the result (the executor's knobs)."""

    per_host_concurrency: int = 2
    """Actions running at once on one host; hosts themselves run in parallel."""
    max_attempts: int = 5
    """Tries per host call on transient errors, the first included."""
    retry_base_delay: float = 2.0
    """Seconds before the first retry; doubles each time, with jitter."""
    retry_max_delay: float = 60.0
    """Seconds: the cap on one backoff delay."""
    retry_deadline: float = 300.0
    """Seconds one host call may spend retrying before it counts as failed."""
    observe_timeout: float = 120.0
    """Seconds to wait for a host's inventory; a slower host counts as unreachable."""
    replace_timeout: float = 600.0
    """Seconds a replacement VM has to run, get an IP and pass its health check
    before the old VM is deleted; past it the old VM stays."""
    ip_wait_timeout: float = 300.0
    """Seconds the check waits for the IP of a VM created in this run."""
    poll_interval: float = 5.0
    """Seconds between polls for an IP or a health check that is not there yet."""
    check_concurrency: int = 8
    """Proxies checked (IP lookup + probe) at once."""
