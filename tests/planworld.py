"""Compact worlds for planner tests: a fleet, proxies and an inventory from plain data.

The plan case files (tests/plan_cases/*.yaml) and the property tests both build
their input through here, so a case reads like the situation it describes
(``apply_plan`` then plays a plan out in such a world)::

    fleet:                        # everything optional
      name: home
      policy: {prune: true, maxDeletesPerRun: 5, allowEmpty: false,
               drift: correct, suspend: false, maxShrinkPercent: 50,
               acknowledgeShrinkTo: 1}
      hosts:                      # default: [{name: kvm01, zone: a}]
        - {name: kvm01, zone: a, maxProxies: 2, network: br0, state: cordoned}
    proxies:
      - {name: web-1, zone: a, host: kvm01, userData: "...", protect: true,
         image: debian, machineType: small, installGuestAgent: true}
      - {proxySet: web, replicas: 2, zone: a}   # web-0, web-1 (as kind: ProxySet names them)
    inventory:                    # a host left out is missing from the inventory
      kvm01:
        - {proxy: web-1, state: running}          # owned, current digest
        - {proxy: web-1, digest: old}             # owned, a stale digest
        - {proxy: web-1, protect: false}          # recorded protect (default: the manifest's)
        - {proxy: web-1, digest: "as-on:kvm02"}   # the digest it would have on kvm02
        - {proxy: web, fleet: home-a, digest: "of:a-web"}  # a-web's digest
        - {name: win11, state: shutoff}           # foreign: no owner
        - {like: web-1}                           # foreign, named as web-1's VM
        - {name: pf-x, fleet: other, proxy: web-1}  # foreign: another fleet
        - {proxy: web-1, base: legacy}            # recorded base: none (made before content names)
        - {proxy: web-1, base: base-debian-cdcdcdcdcdcd.qcow2}  # recorded base, by name
        - {volumesOf: web-9, digest: old}         # pool volumes: web-9's overlay and seed
        - {volume: base-debian.qcow2}             # one pool volume, by name
        - {baseOf: debian}                        # the base of fleet.yaml's debian, and its marker
        - {baseOf: debian, sha256: cdcd...}       # the same for another sha256 (64 hex)
        - {capacity: {cpus: 4, memoryMiB: 8192, poolFreeGiB: 20}}  # what the host has
      kvm02: unreachable
    baseSizes: {debian: 0.3}      # GiB each base of fleet.yaml's image takes (unlisted: unknown)
    history:                      # what earlier runs saw (day-2 rules), all optional
      vms:                        # by domain name on any host, or by proxy (its VM)
        web-1: {failingFor: 1000, healthyOnce: true, restarts: 2, suspectAgo: 30}
      halts:                      # of revision r1, the one planned
        - {proxy: web-2, domain: pf-home-web-2-12345678, reason: "not healthy"}
    replaceTimeout: 600           # the box's deadline for a new VM (default: none)
    deletesLeft: 1                # what the box's delete window still allows (default: no window)
    deletesWhy: "..."             # the reason a delete beyond it is blocked with

A domain may carry ``reason`` (libvirt's state reason: crashed, failed,
panicked), ``vcpus`` and ``memory`` (MiB, as the running domain has them now),
and ``createdAgo`` (seconds before ``NOW`` its metadata says it was created).
A proxy may carry ``restartedAt`` (the proxyfleet.io/restartedAt annotation) and
``address`` (``spec.network.address``: a fixed address, replaced by recreate).
The fleet's policy may carry ``rollout: {maxSurge: 1, maxUnavailable: "25%"}``.
History times count back from a fixed ``NOW``; ``restarts`` were all 60 s ago.

An owned domain's name defaults to ``pf-<fleet>-<proxy>-<digest[:8]>``; a
digest label is ``current``, ``as-on:<host>`` (what it would be on another
host), ``of:<proxy>`` (another proxy's current digest here) or any other
text, which becomes sha256(text); ``current`` (the default) for a proxy the
case does not list is sha256 of some text too. An owned VM's recorded
``protect`` defaults to its manifest's ``lifecycle.protect`` (what the VM was
created with), or false without a manifest. ``volumesOf`` names the overlay
and seed of the domain the proxy would have with that digest (``only: seed``
or ``only: overlay`` for one of them); a volume entry adds no domain. An owned
VM records its image as the executor does: the key and sha256 of its proxy's
image (``debian`` without a manifest) and the base named by that content
(``base: legacy`` records none, as a VM made before content names; ``base:
<name>`` records that one; ``base: none`` records no image at all).
``fleet.images`` overrides fields of the two images (``{debian: {sha256: <64 hex>}}``).
``apply_plan`` gives new VMs their volumes and their base (with its marker),
takes the VM's volumes away with deleted VMs, and removes what a cleanup names.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from reconciler.core.load.proxyset import member_name
from reconciler.core.naming import domain_name, resolve_image
from reconciler.core.plan.digest import proxy_digest
from reconciler.model import (
    ActionKind,
    CloudInit,
    Domain,
    DomainState,
    DriftMode,
    Fleet,
    Host,
    HostInventory,
    HostNetwork,
    Image,
    Inventory,
    Lifecycle,
    MachineType,
    Owner,
    Placement,
    Plan,
    Policy,
    Proxy,
    Repo,
)
from reconciler.model.fleet import (
    RESTARTED_AT,
    Amount,
    DomainType,
    FixedAddress,
    HostState,
    Overcommit,
    Rollout,
)
from reconciler.model.history import Halt, History, VmRecord
from reconciler.model.inventory import BaseSize, Capacity
from reconciler.model.plan import Cleanup, Create, DomainRef, Relabel, RemoveBase, Replace
from reconciler.model.vm import base_marker_name, base_volume_name, vm_volumes

IMAGES = (
    Image(key="debian", url="https://images.example/debian-12.qcow2", sha256="ab" * 32),
    Image(key="bookworm", url="https://images.example/debian-12-bios.qcow2"),
)
MACHINE_TYPES = (
    MachineType(key="small", vcpus=1, memory_mib=1024, disk_gib=10),
    MachineType(key="large", vcpus=4, memory_mib=8192, disk_gib=40),
)


def build_repo(fleet: Mapping[str, Any] | None, proxies: list[Mapping[str, Any]]) -> Repo:
    fleet = fleet or {}
    hosts = tuple(_host(h) for h in fleet.get("hosts", [{"name": "kvm01", "zone": "a"}]))
    policy = fleet.get("policy", {})
    images = tuple(
        dataclasses.replace(image, **fleet.get("images", {}).get(image.key, {})) for image in IMAGES
    )
    built = Fleet(
        name=fleet.get("name", "home"),
        images=images,
        machine_types=MACHINE_TYPES,
        hosts=hosts,
        policy=Policy(
            prune=policy.get("prune", True),
            max_deletes_per_run=policy.get("maxDeletesPerRun", 5),
            allow_empty=policy.get("allowEmpty", False),
            drift=DriftMode(policy.get("drift", "correct")),
            suspend=policy.get("suspend", False),
            rollout=_rollout(policy.get("rollout", {})),
            overcommit=Overcommit(**policy.get("overcommit", {})),
            max_shrink_percent=policy.get("maxShrinkPercent", 50),
            acknowledge_shrink_to=policy.get("acknowledgeShrinkTo"),
        ),
    )
    expanded = [member for raw in proxies for member in _members(raw)]
    return Repo(fleet=built, proxies=tuple(sorted((_proxy(p) for p in expanded), key=_name)))


def _members(raw: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """A ``{proxySet: web, replicas: 2, ...}`` entry: its proxies, named as the loader names
    them (the rest of the entry is their template); any other entry: itself."""
    if "proxySet" not in raw:
        return [raw]
    template = {key: value for key, value in raw.items() if key not in ("proxySet", "replicas")}
    return [
        {**template, "name": member_name(raw["proxySet"], ordinal)}
        for ordinal in range(raw["replicas"])
    ]


def _name(p: Proxy) -> str:
    return p.name


def _amount(raw: int | str) -> Amount:
    if isinstance(raw, str) and raw.endswith("%"):
        return Amount(int(raw[:-1]), percent=True)
    return Amount(int(raw))


def _rollout(raw: Mapping[str, Any]) -> Rollout:
    defaults = Rollout()
    return Rollout(
        max_unavailable=_amount(raw["maxUnavailable"])
        if "maxUnavailable" in raw
        else defaults.max_unavailable,
        max_surge=_amount(raw["maxSurge"]) if "maxSurge" in raw else defaults.max_surge,
    )


NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def build_history(inventory: Inventory, raw: Mapping[str, Any] | None) -> History:
    """The ``history`` of a case: records by domain name, or by proxy for its owned VMs; none
    (as ``proxyfleet plan`` has) when the case gives none."""
    if raw is None:
        return History()
    records = []
    for key, entry in (raw.get("vms") or {}).items():
        failing = entry.get("failingFor")
        suspect = entry.get("suspectAgo")
        record = VmRecord(
            failing_since=NOW - timedelta(seconds=failing) if failing is not None else None,
            healthy_once=entry.get("healthyOnce", True),
            restarts=(NOW - timedelta(seconds=60),) * entry.get("restarts", 0),
            suspect_at=NOW - timedelta(seconds=suspect) if suspect is not None else None,
        )
        for host in inventory.hosts:
            for d in host.domains:
                if d.name == key or (d.owner is not None and d.owner.proxy == key):
                    records.append((DomainRef(host.name, d.name), record))
    raw_halts = raw.get("halts") or ([raw["halt"]] if raw.get("halt") else [])
    halts = tuple(
        Halt(
            revision="r1",
            proxy=halt["proxy"],
            domain=halt.get("domain", ""),
            reason=halt.get("reason", "not healthy"),
            since=NOW,
        )
        for halt in raw_halts
    )
    return History(now=NOW, vms=tuple(records), halts=halts, revision="r1")


def _host(raw: Mapping[str, Any]) -> Host:
    network = raw.get("network", "br0")
    return Host(
        name=raw["name"],
        address="127.0.0.1",
        zone=raw.get("zone", "a"),
        network=HostNetwork(kind="bridge", name=network),
        max_proxies=raw.get("maxProxies"),
        domain_type=DomainType(raw.get("domainType", "kvm")),
        tcg_cache_mib=raw.get("tcgCacheMiB", 256),
        state=HostState(raw.get("state", "active")),
    )


def _proxy(raw: Mapping[str, Any]) -> Proxy:
    return Proxy(
        name=raw["name"],
        placement=Placement(
            zone=raw.get("zone", "a"),
            image=raw.get("image", "debian"),
            machine_type=raw.get("machineType", "small"),
            host=raw.get("host"),
        ),
        cloud_init=CloudInit(user_data=raw.get("userData", "#cloud-config\n")),
        install_guest_agent=raw.get("installGuestAgent", True),
        lifecycle=Lifecycle(protect=raw.get("protect", False)),
        annotations=((RESTARTED_AT, raw["restartedAt"]),) if "restartedAt" in raw else (),
        network=FixedAddress(address=raw["address"]) if "address" in raw else None,
    )


def desired_digest(repo: Repo, proxy_name: str, host_name: str) -> str:
    proxy = repo.proxy(proxy_name)
    host = repo.fleet.host(host_name)
    assert proxy is not None, f"no proxy {proxy_name} in the case"
    assert host is not None, f"no host {host_name} in the case"
    image = resolve_image(repo.fleet, proxy.placement.image)
    machine_type = repo.fleet.machine_type(proxy.placement.machine_type)
    assert image is not None and machine_type is not None
    return proxy_digest(proxy, host, image=image, machine_type=machine_type)


def build_inventory(
    repo: Repo, raw: Mapping[str, Any] | None, base_sizes: Mapping[str, float] | None = None
) -> Inventory:
    hosts = []
    for host_name, domains in (raw or {}).items():
        if domains == "unreachable":
            hosts.append(HostInventory(name=host_name, reachable=False, error="unreachable"))
            continue
        entries = [d for d in domains or [] if "capacity" not in d]
        built = tuple(_domain(repo, host_name, d) for d in entries if not _is_volume(d))
        volumes = tuple(v for d in entries if _is_volume(d) for v in _volumes(repo, host_name, d))
        capacity = next((_capacity(d["capacity"]) for d in domains or [] if "capacity" in d), None)
        hosts.append(
            HostInventory(
                name=host_name,
                reachable=True,
                domains=built,
                volumes=volumes,
                capacity=capacity,
            )
        )
    return Inventory(hosts=tuple(hosts), base_sizes=_base_sizes(repo, base_sizes or {}))


def _base_sizes(repo: Repo, raw: Mapping[str, float]) -> tuple[BaseSize, ...]:
    sizes = []
    for key, gib in raw.items():
        image = resolve_image(repo.fleet, key)
        assert image is not None, f"no image {key} in the case"
        sizes.append(BaseSize(base_volume_name(image), int(gib * 2**30)))
    return tuple(sizes)


def _capacity(raw: Mapping[str, Any]) -> Capacity:
    free = int(raw.get("poolFreeGiB", 100) * 2**30)
    return Capacity(
        cpus=raw.get("cpus", 8),
        memory_mib=raw.get("memoryMiB", 16384),
        pool_capacity_bytes=max(free, int(raw.get("poolGiB", 200) * 2**30)),
        pool_available_bytes=free,
    )


def _is_volume(raw: Mapping[str, Any]) -> bool:
    return "volume" in raw or "volumesOf" in raw or "baseOf" in raw


def _volumes(repo: Repo, host: str, raw: Mapping[str, Any]) -> tuple[str, ...]:
    if "volume" in raw:
        return (raw["volume"],)
    if "baseOf" in raw:
        image = resolve_image(repo.fleet, raw["baseOf"])
        assert image is not None, f"no image {raw['baseOf']} in the case"
        base = base_volume_name(dataclasses.replace(image, sha256=raw.get("sha256", image.sha256)))
        return (base, base_marker_name(base))
    fleet = raw.get("fleet", repo.fleet.name)
    digest = _digest(repo, raw["volumesOf"], host, raw.get("digest", "current"))
    overlay, seed = vm_volumes(domain_name(fleet, raw["volumesOf"], digest))
    only = raw.get("only")
    return {"seed": (seed,), "overlay": (overlay,)}.get(only, (overlay, seed))


def _domain(repo: Repo, host: str, raw: Mapping[str, Any]) -> Domain:
    state = DomainState(raw.get("state", "running"))
    if "proxy" not in raw:
        name = raw.get("name") or domain_name(
            repo.fleet.name, raw["like"], desired_digest(repo, raw["like"], host)
        )
        return Domain(
            name=name,
            state=state,
            owner=None,
            vcpus=raw.get("vcpus"),
            memory_mib=raw.get("memory"),
        )
    fleet = raw.get("fleet", repo.fleet.name)
    digest = _digest(repo, raw["proxy"], host, raw.get("digest", "current"))
    manifest = repo.proxy(raw["proxy"]) if fleet == repo.fleet.name else None
    recorded = manifest.lifecycle.protect if manifest is not None else False
    protect = raw.get("protect", recorded)
    image = resolve_image(repo.fleet, manifest.placement.image if manifest else "debian")
    assert image is not None
    base = raw.get("base", base_volume_name(image))
    owner = Owner(
        fleet=fleet,
        proxy=raw["proxy"],
        digest=digest,
        protect=protect,
        image_key=image.key,
        image_sha256=image.sha256 or "",
        image_base="" if base in ("legacy", "none") else base,
    )
    if "createdAgo" in raw:
        created = NOW - timedelta(seconds=raw["createdAgo"])
        owner = dataclasses.replace(owner, created=created.isoformat(timespec="seconds"))
    if base == "none":  # a record without any image
        owner = dataclasses.replace(owner, image_key="", image_sha256="")
    name = raw.get("name", domain_name(fleet, raw["proxy"], digest))
    return Domain(
        name=name,
        state=state,
        owner=owner,
        reason=raw.get("reason", ""),
        vcpus=raw.get("vcpus"),
        memory_mib=raw.get("memory"),
    )


def _digest(repo: Repo, proxy: str, host: str, label: str) -> str:
    if label == "current" and repo.proxy(proxy) is None:
        label = f"no manifest for {proxy}"
    if label == "current":
        return desired_digest(repo, proxy, host)
    if label.startswith("as-on:"):
        return desired_digest(repo, proxy, label.removeprefix("as-on:"))
    if label.startswith("of:"):
        return desired_digest(repo, label.removeprefix("of:"), host)
    return hashlib.sha256(label.encode()).hexdigest()


def apply_plan(
    repo: Repo, inventory: Inventory, result: Plan, *, healthy: bool = False
) -> Inventory:
    """The simulated world after every unblocked action succeeded (new VMs come up running).

    ``healthy``: a replacement passed its health check in this run, so the
    executor deleted the old VM too; otherwise the old VM is left for a later run.
    """
    hosts = {h.name: {d.name: d for d in h.domains} for h in inventory.hosts}
    volumes = {h.name: set(h.volumes) for h in inventory.hosts}
    for a in result.actions:
        host = hosts.get(a.host or "")
        if a.kind in (ActionKind.CREATE, ActionKind.REPLACE):
            assert host is not None and a.domain and a.proxy and a.digest
            assert a.domain not in host, "a new VM would overwrite a domain"
            proxy = repo.proxy(a.proxy)
            assert proxy is not None
            assert isinstance(a, Create | Replace)
            base = base_volume_name(a.vm.image)
            owner = Owner(
                repo.fleet.name,
                a.proxy,
                a.digest,
                protect=proxy.lifecycle.protect,
                image_key=a.vm.image.key,
                image_sha256=a.vm.image.sha256 or "",
                image_base=base,
            )
            host[a.domain] = Domain(a.domain, DomainState.RUNNING, owner)
            volumes[a.host or ""].update((*vm_volumes(a.domain), base, base_marker_name(base)))
            if isinstance(a, Replace) and healthy:
                del hosts[a.replaces.host][a.replaces.domain]
                volumes[a.replaces.host] -= set(vm_volumes(a.replaces.domain))
        elif a.kind is ActionKind.START:
            assert host is not None and a.domain in host
            host[a.domain] = dataclasses.replace(host[a.domain], state=DomainState.RUNNING)
        elif a.kind is ActionKind.RELABEL:
            assert host is not None and a.domain in host and isinstance(a, Relabel)
            host[a.domain] = dataclasses.replace(host[a.domain], owner=a.owner)
        elif a.kind is ActionKind.DELETE:
            assert host is not None and a.domain in host
            del host[a.domain]
            volumes[a.host or ""] -= set(vm_volumes(a.domain))
        elif isinstance(a, Cleanup | RemoveBase):
            assert host is not None and a.domain not in host
            assert set(a.volumes) <= volumes[a.host or ""], "a cleanup of volumes not there"
            volumes[a.host or ""] -= set(a.volumes)
    return dataclasses.replace(
        inventory,
        hosts=tuple(
            dataclasses.replace(
                h, domains=tuple(hosts[h.name].values()), volumes=tuple(sorted(volumes[h.name]))
            )
            for h in inventory.hosts
        ),
    )
