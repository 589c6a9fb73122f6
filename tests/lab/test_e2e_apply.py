"""End to end on the lab: `proxyfleet apply` against real hypervisors and real guests.

Issue 5's scenarios, in file order, on one fleet repo and one set of VMs: each scenario
starts from what the one before left, which keeps the slow TCG boots few (five in all).

1. Three proxies in two zones, UEFI and BIOS: every VM boots, its IP comes from the guest
   agent and its squid (started by the proxy's own user-data) relays the lab's 204 probe.
2. A second apply makes no mutating libvirt call.
4. A removed manifest deletes the VM, its overlay, seed and NVRAM.
6. A broken manifest: nothing is planned or changed, the error names file and line.
3. A changed userData replaces the VM: the new one runs and is healthy before the old one
   is deleted (the apply's own log and the host's running domains sampled during it say so).
   The new VM runs no guest agent, so its IP comes from the host's ARP table.
5. One host's sshd stopped: reported unreachable, nothing deleted, nothing created anywhere;
   sshd back, the next apply converges.
7. libvirtd restarted on a host while an apply uploads a base image for a pending create:
   the run after converges and nothing leaked (domains, volumes, NVRAM, base images).

The lab has three hosts here: the first in zone-a, the other two in zone-b, so that
"creates nothing elsewhere" in scenario 5 has an elsewhere to be tempted by.
"""

from __future__ import annotations

import hashlib
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from labutil import (
    SQUID_BEFORE,
    Applied,
    Sampler,
    apply,
    daemon_pid,
    domains,
    finish_apply,
    git,
    lab_daemon,
    nvram_files,
    pool_file,
    pool_files,
    probe_through,
    squid_user_data,
    start_apply,
    virsh,
)

from lab import config as lab_config
from lab.hosts import LabError
from reconciler.model import Image
from reconciler.model.vm import base_volume_name

LAB_HOSTS = 3
UEFI, BIOS = "debian12", "debian12-bios"
OK = r"duration_ms=[\d.]+$"  # a call that succeeded (a failed one has its error after)
NO_AGENT = "bootcmd:\n  - [systemctl, mask, --now, qemu-guest-agent]\n"
FIRST = {"a-uefi": ("zone-a", UEFI), "a-bios": ("zone-a", BIOS), "b-uefi": ("zone-b", UEFI)}


class Fleet:
    """The module's fleet repo (a git repo) and the applies made on it."""

    def __init__(self, lab: dict[str, Any], repo: Path) -> None:
        self.lab = lab
        self.repo = repo
        self.runs = 0
        self.hosts = [h["name"] for h in lab["hosts"]]
        self.zones = {name: ("zone-a" if i == 0 else "zone-b") for i, name in enumerate(self.hosts)}
        self.images: dict[str, str] = {}

    def put(
        self,
        name: str,
        zone: str,
        image: str,
        *,
        tag: str = "v1",
        pin: str = "",
        agent: bool = True,
        mask_agent: bool | None = None,
        vendor_data: str = "",
    ) -> None:
        """``agent=False``: no guest agent in the guest (proxyfleet adds none, and unless
        ``mask_agent=False`` the image's own is masked and stopped at boot), so its IP must
        come from the host. ``vendor_data``: the proxy's own ``spec.cloudInit.vendorData``."""
        self.images[name] = image
        mask = not agent if mask_agent is None else mask_agent
        text = squid_user_data(name, tag=tag) + (NO_AGENT if mask else "")
        user_data = "".join(f"      {line}\n" for line in text.split("\n"))
        vendor = "".join(f"      {line}\n" for line in vendor_data.rstrip("\n").split("\n"))
        (self.repo / "proxies" / f"{name}.yaml").write_text(
            "apiVersion: proxyfleet/v1\nkind: Proxy\n"
            f"metadata:\n  name: {name}\n"
            f"spec:\n  placement:\n    zone: {zone}\n    image: {image}\n    machineType: tiny\n"
            + (f"    host: {pin}\n" if pin else "")
            + ("" if agent else "  installGuestAgent: false\n")
            + "  cloudInit:\n    userData: |\n"
            + user_data.rstrip(" \n")
            + "\n"
            + (f"    vendorData: |\n{vendor}" if vendor_data else "")
            + f"  health:\n    probeURL: {self.lab['probeUrl']}\n    expectStatus: 204\n"
            "    timeoutSeconds: 10\n"
        )

    def commit(self, message: str) -> None:
        git(self.repo, "add", "-A")
        git(self.repo, "commit", "-q", "-m", message)

    def log_file(self) -> Path:
        self.runs += 1
        return self.repo.parent / f"apply-{self.runs}.log"

    def apply(self) -> Applied:
        return apply(self.lab, self.repo, self.log_file())

    def where(self, proxy: str) -> tuple[str, str]:
        """(host, domain) of the one VM of ``proxy`` on the lab hosts, found by name."""
        found = [
            (host, name)
            for host in self.hosts
            for name in domains(host)
            if name.startswith(f"pf-e2e-{proxy}-")
        ]
        assert len(found) == 1, found
        return found[0]


@pytest.fixture(scope="module")
def fleet(lab: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> Fleet:
    assert len(lab["hosts"]) == LAB_HOSTS
    repo = tmp_path_factory.mktemp("e2e") / "fleet"
    (repo / "proxies").mkdir(parents=True)
    fl = Fleet(lab, repo)
    images = (lab_config.STATE / "images.yaml").read_text().splitlines()[1:]
    hosts = "".join(
        f"    - name: {h['name']}\n      address: {h['address']}\n      port: {h['port']}\n"
        f"      user: {h['user']}\n      zone: {fl.zones[h['name']]}\n      pool: default\n"
        "      network: {bridge: br0}\n      domainType: qemu\n      cpuMode: none\n"
        for h in lab["hosts"]
    )
    (repo / "fleet.yaml").write_text(
        "apiVersion: proxyfleet/v1\nkind: Fleet\nmetadata:\n  name: e2e\nspec:\n"
        + "".join(f"  {line}\n" for line in images)
        + "  machineTypes:\n    tiny:\n      vcpus: 1\n      memoryMiB: 512\n      diskGiB: 4\n"
        + "  hosts:\n"
        + hosts
        + "  policy:\n    prune: true\n    maxDeletesPerRun: 5\n    allowEmpty: false\n"
    )
    for name, (zone, image) in FIRST.items():
        fl.put(name, zone, image)
    git(repo, "init", "-q", "-b", "main")
    fl.commit("e2e fleet")
    return fl


def snapshot(fl: Fleet) -> dict[str, Any]:
    """Every host's domains (uuid, state), pool files and NVRAM files, read in its namespaces."""
    return {h: (domains(h), pool_files(h), nvram_files(h)) for h in fl.hosts}


def assert_healthy(fl: Fleet, applied: Applied, proxy: str, *, tag: str = "v1") -> dict[str, Any]:
    """Healthy by apply's word and by the test's own request through the proxy's squid."""
    entry = applied.proxies()[proxy]
    assert entry["state"] == "running" and entry["health"] == "healthy", entry
    subnet = next(h["guestSubnet"] for h in fl.lab["hosts"] if h["name"] == entry["host"])
    assert entry["ip"].startswith(subnet.rsplit(".", 1)[0] + "."), entry
    probe = probe_through(entry["ip"], fl.lab["probeUrl"])
    assert probe.status == 204, (entry, probe)
    # squid runs this user-data's config, and was off until its runcmd started it
    assert f"{proxy}-{tag}-{SQUID_BEFORE}" in probe.via, (entry, probe)
    return entry


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def files_of(domain: str) -> set[str]:
    return {f"{domain}.qcow2", f"{domain}-seed.iso"}


def agent_ip(host: str, domain: str) -> str:
    """The guest's IPv4 as its guest agent reports it (asked by the test, not by apply);
    "" while the agent is not up yet."""
    try:
        out = virsh(host, "domifaddr", domain, "--source", "agent")
    except LabError:
        return ""
    for line in out.splitlines():
        fields = line.split()
        if len(fields) >= 4 and fields[-2] == "ipv4" and not fields[-1].startswith("127."):
            return fields[-1].split("/")[0]
    return ""


def guest_ip(host: str, domain: str) -> str:
    """The guest's IPv4 from its agent, else from libvirt's DHCP lease (a guest on a libvirt
    network without agent); "" while neither knows one."""
    found = agent_ip(host, domain)
    if found:
        return found
    try:
        out = virsh(host, "domifaddr", domain, "--source", "lease")
    except LabError:
        return ""
    ips = [f.split("/")[0] for line in out.splitlines() for f in line.split()[-1:] if "/" in f]
    return ips[0] if ips else ""


def settle(fl: Fleet, applied: Applied, fresh: list[str]) -> Applied:
    """Every action of ``applied`` succeeded and the proxies it created serve; the apply that
    says Ready (``applied`` itself, or the next one).

    apply waits a bounded time (300 s) for the VMs it created to pass their health check.
    Under TCG on this busy machine a guest can still be in cloud-init then, and apply rightly
    says unhealthy (exit 3). Then the test waits for those squids itself, and the next apply
    must find nothing to change and say Ready. Only proxies of ``fresh`` may lag so."""
    outcomes = applied.result["outcomes"]
    assert all(o["result"] == "succeeded" for o in outcomes), outcomes
    if applied.code == 0:
        final = applied
    else:
        slow = [p for p in applied.result["proxies"] if p["health"] != "healthy"]
        assert slow and {p["name"] for p in slow} <= set(fresh), applied.result["proxies"]
        for entry in slow:
            assert entry["state"] == "running", entry
            deadline = time.monotonic() + 900  # TCG boots on a machine shared with other labs
            while True:
                ip = entry["ip"] or guest_ip(entry["host"], entry["domain"])
                if ip and probe_through(ip, fl.lab["probeUrl"]).status == 204:
                    break
                assert time.monotonic() < deadline, f"{entry['name']} never served"
                time.sleep(5)
        late = ", ".join(p["name"] for p in slow)
        print(f"apply stopped waiting before {late} served; the next apply checks them")
        final = fl.apply()
        assert final.mutating_calls() == [], final.result["plan"]
    assert final.code == 0 and final.result["exitCode"] == 0, final.result
    ready = next(c for c in final.result["conditions"] if c["type"] == "Ready")
    assert ready["status"] is True, ready
    return final


def test_apply_boots_every_proxy_and_each_relays_the_lab_probe(fleet: Fleet) -> None:
    applied = fleet.apply()
    assert sorted(applied.proxies()) == sorted(FIRST), applied.result["problems"]
    assert sorted(a["proxy"] for a in applied.actions("create")) == sorted(FIRST)
    final = settle(fleet, applied, list(FIRST))
    for name, (zone, image) in FIRST.items():
        entry = assert_healthy(fleet, final, name)
        assert entry["zone"] == zone and fleet.zones[entry["host"]] == zone, entry
        assert agent_ip(entry["host"], entry["domain"]) == entry["ip"], entry
        has_nvram = any(f.startswith(entry["domain"]) for f in nvram_files(entry["host"]))
        assert has_nvram == (image == UEFI), (entry, nvram_files(entry["host"]))


def test_a_second_apply_makes_no_mutating_libvirt_call(fleet: Fleet) -> None:
    applied = fleet.apply()
    assert {a["action"] for a in applied.result["plan"]["actions"]} == {"keep"}
    assert "rpc=virConnectGetAllDomainStats" in applied.log
    assert applied.mutating_calls() == []
    assert applied.code == 0, applied.result["problems"]


def test_a_removed_manifest_deletes_its_vm_overlay_seed_and_nvram(fleet: Fleet) -> None:
    host, domain = fleet.where("a-uefi")
    assert files_of(domain) <= pool_files(host)
    assert any(f.startswith(domain) for f in nvram_files(host))
    (fleet.repo / "proxies" / "a-uefi.yaml").unlink()
    fleet.commit("remove a-uefi")
    applied = fleet.apply()
    assert [a["domain"] for a in applied.actions("delete")] == [domain]
    assert applied.code == 0, applied.result["problems"]
    assert domain not in domains(host)
    assert not files_of(domain) & pool_files(host), pool_files(host)
    assert not any(f.startswith(domain) for f in nvram_files(host)), nvram_files(host)


def test_a_broken_manifest_changes_nothing_and_names_file_and_line(fleet: Fleet) -> None:
    before = snapshot(fleet)
    # Alongside the broken file, changes that would delete one VM and create another.
    (fleet.repo / "proxies" / "a-bios.yaml").unlink()
    fleet.put("d-new", "zone-a", UEFI)
    (fleet.repo / "proxies" / "broken.yaml").write_text(
        "apiVersion: proxyfleet/v1\nkind: Proxy\nmetadata:\n  name: broken\nspec:\n"
        "  placement:\n    zone: zone-a\n    image: debian12\n    machineType: tiny\n"
        "  health:\n    expectStatus: lots\n"  # line 11
    )
    fleet.commit("a broken manifest")
    applied = fleet.apply()
    assert applied.code == 1 and applied.result["result"] == "stalled", applied.result
    assert applied.result["plan"] is None
    problems = applied.result["problems"]
    assert any(p.startswith("proxies/broken.yaml:11:") for p in problems), problems
    assert "rpc=" not in applied.log  # no host was even asked
    assert applied.mutating_calls() == []
    assert snapshot(fleet) == before
    git(fleet.repo, "revert", "--no-edit", "HEAD")
    (fleet.repo / "proxies" / "d-new.yaml").unlink(missing_ok=True)
    fleet.images.pop("d-new")
    back = fleet.apply()
    assert {a["action"] for a in back.result["plan"]["actions"]} == {"keep"}, back.result["plan"]
    assert back.mutating_calls() == [] and back.code == 0


def test_a_changed_user_data_replaces_the_vm_and_the_new_one_is_healthy_before_the_old_goes(
    fleet: Fleet,
) -> None:
    host, old = fleet.where("b-uefi")
    # The new VM runs no guest agent: its IP comes from the host's ARP table (issue 14).
    fleet.put("b-uefi", "zone-b", UEFI, tag="v2", agent=False)
    fleet.commit("b-uefi: new squid config, no guest agent")
    with Sampler(host) as sampler:
        applied = fleet.apply()
    (replace,) = applied.actions("replace")
    new = replace["domain"]
    assert replace["replaces"] == {"host": host, "domain": old} and new != old, replace
    assert applied.code == 0, applied.result["problems"]
    entry = assert_healthy(fleet, applied, "b-uefi", tag="v2")
    assert entry["domain"] == new
    # found without the agent: libvirt's ARP reader fails on this kernel, the host's
    # /proc/net/arp answered, and the agent is not there to have answered instead
    assert applied.first(rf"address of {new} from the host's ARP table: {entry['ip']}")
    assert agent_ip(entry["host"], new) == ""
    # The apply's own record, in time order: the new VM defined and started, found healthy,
    # then (a follow-up run of the same apply) the old one destroyed and undefined.
    defined = applied.first(rf"rpc=virDomainDefineXML host=\S+ domain={new} {OK}")
    started = applied.first(rf"rpc=virDomainCreate host=\S+ domain={new} {OK}")
    healthy = applied.first(rf"Proxy VM {new} on \S+ passed its health check")
    destroyed = applied.first(rf"rpc=virDomainDestroy host={host} domain={old} {OK}")
    undefined = applied.first(rf"rpc=virDomainUndefineFlags host={host} domain={old} .*{OK}")
    assert defined <= started < healthy <= destroyed <= undefined
    # The host's own record: the proxy always had a running VM, both ran side by side for
    # a while, and the old one stopped only after the new one was found healthy.
    samples = sampler.samples
    assert samples and all(old in s or new in s for _, s in samples), samples
    both = [t for t, s in samples if old in s and new in s]
    assert both, samples
    assert all(t >= healthy for t, s in samples if old not in s), (healthy, samples)
    print(f"old and new ran side by side for {both[-1] - both[0]:.0f} s ({len(both)} samples)")
    assert old not in domains(host)
    assert not files_of(old) & pool_files(host), pool_files(host)
    assert not any(f.startswith(old) for f in nvram_files(host)), nvram_files(host)
    assert files_of(new) <= pool_files(entry["host"])


@pytest.fixture
def sshd_stopped(fleet: Fleet) -> Iterator[str]:
    """sshd of the host that runs b-uefi is stopped for the test (and started again after)."""
    host, _ = fleet.where("b-uefi")
    lab_daemon("stop", "sshd", host)
    try:
        yield host
    finally:
        lab_daemon("start", "sshd", host)


def test_an_unreachable_host_blocks_deletes_and_creates_until_its_sshd_is_back(
    fleet: Fleet, sshd_stopped: str
) -> None:
    down = sshd_stopped
    _, doomed = fleet.where("b-uefi")
    others = [h for h in fleet.hosts if h != down]
    assert any(fleet.zones[h] == "zone-b" for h in others)  # the zone has a reachable host
    before = snapshot(fleet)
    (fleet.repo / "proxies" / "b-uefi.yaml").unlink()
    fleet.put("b-two", "zone-b", UEFI)
    fleet.commit("remove b-uefi, add b-two")
    applied = fleet.apply()
    reach = {h["name"]: h for h in applied.result["hosts"]}
    assert reach[down]["reachable"] is False and reach[down]["error"], reach
    assert all(reach[h]["reachable"] for h in others), reach
    kinds = {a["action"] for a in applied.result["plan"]["actions"]}
    assert not kinds & {"create", "replace", "delete", "start"}, applied.result["plan"]
    (blocked,) = [a for a in applied.actions("blocked") if a["proxy"] == "b-two"]
    assert blocked["blocks"] == "create" and down in blocked["reason"], blocked
    assert applied.mutating_calls() == []
    assert applied.code == 3 and applied.result["result"] != "stalled", applied.result
    assert snapshot(fleet) == before  # the VMs on every host untouched, down's too

    lab_daemon("start", "sshd", down)
    again = fleet.apply()
    assert [a["domain"] for a in again.actions("delete")] == [doomed], again.result["plan"]
    assert [a["proxy"] for a in again.actions("create")] == ["b-two"], again.result["plan"]
    assert_healthy(fleet, settle(fleet, again, ["b-two"]), "b-two")
    assert doomed not in domains(down)
    assert not files_of(doomed) & pool_files(down)
    assert not any(f.startswith(doomed) for f in nvram_files(down))


def test_libvirtd_restarted_mid_apply_then_the_next_apply_converges_with_nothing_leaked(
    fleet: Fleet,
) -> None:
    host, _ = fleet.where("b-two")  # a host with a running VM ...
    sha256 = fleet.lab["image"]["sha256"]
    base = pool_file(host, base_volume_name(Image(key=BIOS, url="", sha256=sha256)))
    assert not base.exists()  # ... and no BIOS base yet: the create must upload it first
    fleet.put("c-bios", "zone-b", BIOS, pin=host)
    fleet.commit("add c-bios")
    pid = daemon_pid(host, "libvirtd")
    log_file = fleet.log_file()
    proc, started = start_apply(fleet.lab, fleet.repo, log_file)
    upload = re.compile(rf"rpc=virStorageVolCreateXML host={host} volume={base.name} ")
    try:
        deadline = time.monotonic() + 600
        while not upload.search(log_file.read_text()):  # the upload starts right after this
            assert proc.poll() is None, log_file.read_text()[-4000:]
            assert time.monotonic() < deadline, "the base image upload never started"
            time.sleep(0.05)
        lab_daemon("restart", "libvirtd", host)
        assert proc.poll() is None  # the apply was still going when libvirtd came back
        print(f"libvirtd on {host} restarted {time.monotonic() - started:.0f} s into the apply")
    finally:
        first = finish_apply(proc, started, log_file)
    assert daemon_pid(host, "libvirtd") not in (None, pid)
    for outcome in first.result["outcomes"]:
        print(f"  restarted run: {outcome}")

    converged = settle(fleet, fleet.apply(), ["c-bios"])
    for name in ("a-bios", "b-two", "c-bios"):
        assert_healthy(fleet, converged, name)
    idle = fleet.apply()
    assert idle.mutating_calls() == [] and idle.code == 0

    # Nothing leaked: every domain is an owned, running VM of a proxy; every pool file is a
    # VM's overlay or seed, or a complete base image with its marker; every NVRAM file a VM's.
    image_sha256 = fleet.lab["image"]["sha256"]
    proxies = converged.proxies()
    for h in fleet.hosts:
        owned = {p["domain"]: name for name, p in proxies.items() if p["host"] == h}
        assert {d: s for d, (_, s) in domains(h).items()} == dict.fromkeys(owned, "running")
        files = pool_files(h)
        bases = {f for f in files if f.startswith("base-") and not f.endswith(".sha256")}
        assert files == set().union(*map(files_of, owned), bases, {f"{b}.sha256" for b in bases})
        for b in bases:  # complete: the image's bytes, not a cut-off upload
            assert sha256_of(pool_file(h, b)) == image_sha256, (h, b)
        uefi = {d for d, name in owned.items() if fleet.images[name] == UEFI}
        assert {f.split("_VARS")[0] for f in nvram_files(h)} == uefi, (h, nvram_files(h))
