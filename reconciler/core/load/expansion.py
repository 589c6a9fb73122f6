"""What one load of the fleet repo may expand to, beyond the bytes it reads.

``ReadLimits`` (reconciler.core.load.repofiles) bounds the bytes read; a few of
those bytes can still stand for far more work. A five-line ProxySet asks for
``replicas`` proxies; one 1 MiB ``userDataFile`` with ``${proxy.name}`` becomes a
distinct 1 MiB text per member, each parsed again as a cloud-config; and a
manifest dense in small values costs about 100 µs of pure-Python YAML per value,
so a repo within the byte limits could take minutes and gigabytes to load. So
one load shares one ``Budget``:

- ``max_proxies``: proxies built, ProxySet members counted (and a set's template
  that builds none counted once), checked *before* a set is expanded;
- ``max_values``: YAML values composed, manifests and cloud-configs together;
- ``max_user_data_bytes``: userData held by the proxies once variables are
  substituted (each member holds its own copy);
- ``max_cloud_config_bytes``: distinct cloud-config texts checked.

Past any of them the load stops that kind of work and reports one problem naming
the file, line and field that crossed the bound; the repo is refused as any other
invalid repo (nothing acts on it). docs/security.md gives the worst load these
bounds allow, measured.
"""

from __future__ import annotations

from dataclasses import dataclass

from reconciler.core.load.yamlload import ValueBudget


@dataclass(frozen=True, slots=True)
class ExpandLimits:
    """Bounds on what one load of the fleet repo may build and parse."""

    max_proxies: int = 2000
    """Proxies in the repo, ProxySet members counted (two sets at the schema's 1,000)."""
    max_values: int = 40_000
    """YAML values composed in one load, manifests and cloud-configs together (about
    90 µs each: 3.6 s; a Proxy document written out with a short cloud-config holds
    about 35, so a fleet near ``max_proxies`` is written as ProxySets)."""
    max_user_data_bytes: int = 16 * 1024 * 1024
    """Bytes: every proxy's userData, variables substituted, together (16 MiB)."""
    max_cloud_config_bytes: int = 3 * 1024 * 1024
    """Bytes: the distinct cloud-config texts one load checks, together (3 MiB: 1.5 KiB
    for each of 2,000 proxies, about 3.5 s to check)."""


class Budget:
    """What one load has used of its ``ExpandLimits`` (one per load, never shared)."""

    def __init__(self, limits: ExpandLimits) -> None:
        self.limits = limits
        self.values = ValueBudget(limits.max_values)
        self.proxies = 0
        self.proxies_refused = False
        """Set once a document's proxies did not fit: the documents after it are not built."""
        self.user_data_bytes = 0
        self.cloud_config_bytes = 0
        self._cloud_configs: set[bytes] = set()

    @property
    def exhausted(self) -> bool:
        """No more cloud-config may be checked: the values or the texts' bytes ran out."""
        return self.values.spent or self.cloud_config_bytes > self.limits.max_cloud_config_bytes

    def take_proxies(self, count: int) -> bool:
        """Count ``count`` more proxies; False (nothing counted) when they do not fit."""
        if self.proxies_refused or self.proxies + count > self.limits.max_proxies:
            self.proxies_refused = True
            return False
        self.proxies += count
        return True

    def take_user_data(self, size: int) -> bool:
        """Count one proxy's substituted userData; False once the total is past the bound."""
        self.user_data_bytes += size
        return self.user_data_bytes <= self.limits.max_user_data_bytes

    def take_cloud_config(self, key: bytes, size: int) -> bool:
        """Count a cloud-config text (by its digest, once per load); False past the bound."""
        if key not in self._cloud_configs:
            self._cloud_configs.add(key)
            self.cloud_config_bytes += size
        return self.cloud_config_bytes <= self.limits.max_cloud_config_bytes


def size(n: int) -> str:
    """``n`` bytes as operators read a limit (``16 MiB``)."""
    for unit, scale in (("MiB", 1024 * 1024), ("KiB", 1024)):
        if n % scale == 0:
            return f"{n // scale} {unit}"
    return f"{n} bytes"
