"""A run never waits for a boot, on the lab: the daemon stays live through a rollout, a
halt and a refused force-push (issue 39).

One fleet, two zones: zone-a on the first lab host with four UEFI proxies (pfl-a..pfl-d),
zone-b on the second with one (pfl-z); ``policy.rollout: {maxSurge: 1, maxUnavailable: 1}``
from the start. ``proxyfleet run`` as a process (interval 15 s), as in test_e2e_day2.py,
whose rig this module reuses. The scenarios share the five guests and run in this order,
each starting from what the previous one left:

a. a commit rolls zone-b (pfl-z gets a new userData: a new VM, minutes to boot under TCG);
   once its new VM is defined, pfl-a's QEMU (zone-a) is SIGKILLed. It is started again by
   the first or second run after the kill, before the rollout's old VM is deleted, and
   ``get`` shows the crash and the start meanwhile;
b. a commit gives every zone-a proxy a squid that never starts: batch 1 (pfl-a, pfl-b) gets
   two new VMs that boot and never pass the probe. The halt names both; no old VM is
   deleted or gated for delete; all four proxies answer every sample through their old VMs;
   ``get``, status.yaml and ``proxyfleet_proxy_health`` report all four healthy with the
   halt named; the revert removes the two new VMs and converges;
c. main force-pushed back to the first commit (not a fast-forward: refused), then pfl-c's
   QEMU SIGKILLed: it is started again and reported, and
   ``proxyfleet_source_revision_info`` still names the accepted revision.

Four proxies in a zone (the issue's own case) and a fifth in another zone for a: five
TCG guests at once, seven during b. The lab's hosts have the machine's memory (23 GiB
here); test_e2e_day2 runs four at once (three and a replacement), test_e2e_daemon two.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest
from labutil import Sampler
from prometheus_client.parser import text_string_to_metric_families
from test_e2e_daemon import git, probe_through
from test_e2e_day2 import (
    BOOT,
    BROKEN_GATE,
    REPLACE_TIMEOUT,
    Rig,
    Through,
    fleet_yaml,
    of_proxy,
    proxy_yaml,
    qemu_pid,
    running_rig,
    via,
    vms,
)

from lab.sampling import Periodic
from reconciler.adapters.surface.controlsocket import request
from reconciler.errors import ControlError

LAB_HOSTS = 2
FLEET = "e2el"
PREFIX = f"pf-{FLEET}-"
ZONES = ("zone-a", "zone-b")
ZONE_A = ("pfl-a", "pfl-b", "pfl-c", "pfl-d")
OTHER = "pfl-z"
PROXIES = (*ZONE_A, OTHER)
ROLLOUT = "maxUnavailable: 1\nmaxSurge: 1"


def fleet(lab: dict[str, Any]) -> str:
    return fleet_yaml(lab, rollout=ROLLOUT, fleet=FLEET, zones=ZONES)


def proxy(lab: dict[str, Any], name: str, generation: int, *, broken: bool = False) -> str:
    zone = ZONES[1] if name == OTHER else ZONES[0]
    return proxy_yaml(name, lab["probeUrl"], generation, broken=broken, zone=zone)


@pytest.fixture(scope="module")
def rig(lab: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rig]:
    files: dict[str, str | None] = {"fleet.yaml": fleet(lab)}
    for name in PROXIES:
        files[f"proxies/{name}.yaml"] = proxy(lab, name, 1)
    tmp = tmp_path_factory.mktemp("live-e2e")
    message = "Four proxies in zone-a, one in zone-b"
    with running_rig(lab, tmp, message, files, names=PROXIES) as rig:
        yield rig


# -- what an operator asks ----------------------------------------------------------------


def get(rig: Rig) -> dict[str, Any]:
    """``proxyfleet get --json`` against the daemon's state dir: its answer."""
    done = subprocess.run(
        [sys.executable, "-m", "reconciler", "get", "--state-dir", str(rig.state), "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, (done.stdout, done.stderr)
    return dict(json.loads(done.stdout))


def metric(rig: Rig, name: str) -> list[dict[str, str]]:
    """The label sets of ``name``'s samples on /metrics."""
    _, text = rig.daemon.get("/metrics")
    return [
        dict(sample.labels)
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name
    ]


def asked(rig: Rig) -> dict[str, Any]:
    """The daemon's answer to ``get`` over its control socket (what ``get --json`` prints),
    without a Python process per question."""
    answer = next(iter(request(rig.state / "control.sock", {"command": "get"}, timeout=30)))
    return dict(answer)


class Gets(Periodic):
    """The daemon's ``get`` answer every 2 s in a thread: what an operator saw meanwhile."""

    def __init__(self, rig: Rig) -> None:
        super().__init__(2.0)
        self.rig = rig
        self.seen: list[dict[str, Any]] = []

    def look(self) -> None:
        with contextlib.suppress(ControlError, StopIteration):  # a lost answer is no evidence
            self.seen.append(asked(self.rig))

    def restarted(self, name: str) -> list[dict[str, Any]]:
        """The answers that show proxy ``name``'s VM crashed and started again (its detail:
        "shut off (crashed); drift: correct starts it (restart N)")."""
        found = []
        for answer in self.seen:
            entry = next((p for p in answer["status"]["proxies"] if p["name"] == name), {})
            if all(t in str(entry.get("detail", "")) for t in ("crashed", "starts it")):
                found.append(answer)
        return found


def kill_qemu(rig: Rig, name: str) -> tuple[str, str, int]:
    """SIGKILL the QEMU of proxy ``name``'s VM: its domain, host and the daemon's count of
    started runs at the kill."""
    entry = rig.proxies()[name]
    domain, host = entry["domain"], entry["host"]
    runs = rig.daemon.log().count("Reconcile started")
    os.kill(qemu_pid(host, domain), signal.SIGKILL)
    return domain, host, runs


def started_again(rig: Rig, domain: str, host: str, runs: int) -> int:
    """Wait for the start of ``domain`` after a kill; the runs that began since the kill up
    to and including the one that started it."""
    line = f"Start of {domain} on {host} succeeded"
    rig.wait(f"the start of {domain}", lambda: line in rig.daemon.log(), timeout=600)
    log = rig.daemon.log()
    return log[: log.find(line)].count("Reconcile started") - runs


# -- the scenarios, in file order on the same guests --------------------------------------


def test_a_a_vm_killed_during_a_rollout_elsewhere_is_started_again_at_once(rig: Rig) -> None:
    lab = rig.lab
    before = vms(lab, PREFIX)
    old_z = of_proxy(before, OTHER, PREFIX)
    assert len(before) == len(PROXIES) and len(old_z) == 1, before
    rig.remote.push(f"{OTHER}: generation 2", {f"proxies/{OTHER}.yaml": proxy(lab, OTHER, 2)})
    assert rig.daemon.hook() == 202
    rig.wait(
        f"the new VM of {OTHER}",
        lambda: len(of_proxy(vms(lab, PREFIX), OTHER, PREFIX)) == 2,
        timeout=600,
    )
    with Gets(rig) as gets:
        t0 = time.monotonic()
        domain, host, runs = kill_qemu(rig, "pfl-a")
        killed = rig.daemon.log()
        started = started_again(rig, domain, host, runs)
        rig.timings["a: kill -> start seen"] = time.monotonic() - t0
        rig.wait("get to show the start", lambda: bool(gets.restarted("pfl-a")), 120)
    log = rig.daemon.log()
    start = log.find(f"Start of {domain} on {host} succeeded")
    print(f"a: pfl-a started again by run {started} after the kill")
    assert started <= 2, log[len(killed) :][-4000:]
    # Still in flight: the rollout's old VM was deleted after the start, not before.
    assert f"deleted domain {old_z[0]}" not in log[:start], log[-4000:]
    shown = gets.restarted("pfl-a")
    assert any(  # the start shown while OTHER was still served by its old VM
        next(p for p in a["status"]["proxies"] if p["name"] == OTHER)["domain"] == old_z[0]
        for a in shown
    ), shown[-1:]
    rig.wait(
        f"{OTHER} rolled and every proxy healthy",
        lambda: (
            old_z[0] not in vms(lab, PREFIX)
            and rig.proxies()[OTHER]["domain"] != old_z[0]
            and rig.all_healthy()
        ),
        timeout=REPLACE_TIMEOUT + 300,
    )
    assert vms(lab, PREFIX)[domain] == before[domain]  # the same domain, started again
    status, header = probe_through(rig.proxies()[OTHER]["ip"], lab["probeUrl"])
    assert status == 204 and via(OTHER, 2) in header, header


def test_b_a_bad_commit_halts_whole_and_the_old_vms_keep_serving(rig: Rig) -> None:
    lab, daemon, remote = rig.lab, rig.daemon, rig.remote
    before = vms(lab, PREFIX)
    olds = {name: of_proxy(before, name, PREFIX)[0] for name in ZONE_A}
    ips = {name: rig.proxies()[name]["ip"] for name in ZONE_A}
    host = before[olds["pfl-a"]].host
    rig.restart(BROKEN_GATE)
    with Through(ips, lab["probeUrl"]) as through, Sampler(host, interval=2.0) as listed:
        remote.push(
            "zone-a: a squid unit name with a typo",
            {f"proxies/{n}.yaml": proxy(lab, n, 2, broken=True) for n in ZONE_A},
        )
        assert daemon.hook() == 202
        t0 = time.monotonic()
        rig.halted_saying("pfl-a, pfl-b failed their health check")
        rig.timings["b: commit -> halted"] = time.monotonic() - t0
        rig.cycle()  # two whole runs of the halted revision
        rig.cycle()
        answer = get(rig)
        health = {name: daemon.health_of(name) for name in ZONE_A}
        halted = vms(lab, PREFIX)
    new = sorted(set(halted) - set(before))
    assert [n for n in ZONE_A for d in new if d in of_proxy(halted, n, PREFIX)] == [
        "pfl-a",
        "pfl-b",
    ], new
    assert set(before) <= set(halted), (before, halted)
    # No old VM deleted: each ran in every listing of its host.
    assert listed.samples and all(set(olds.values()) <= seen for _, seen in listed.samples)
    # ... nor planned for delete: no run planned or made one; each old VM's delete is held
    # by the halt (a blocked action, no call), not by a gate that waits.
    log = daemon.log()
    planned = [line for line in log.splitlines() if 'msg="Planned' in line]
    deletes = [line for line in planned if re.search(r"\d+ delete\b", line)]
    assert planned and not deletes and "Delete of" not in log, deletes
    held = [b for b in rig.status().get("blocked", []) if b["domain"] in olds.values()]
    assert all("rollout halted" in b["reason"] for b in held), held
    assert through.samples and through.failures(1) == [], through.failures(1)[:20]
    print(f"b: {len(through.samples)} samples through 4 proxies, every one answered")
    for name, old in olds.items():  # served by the old VMs, and said so everywhere
        assert rig.proxies()[name]["health"] == "healthy", rig.proxies()[name]
        assert rig.proxies()[name]["domain"] == old, rig.proxies()[name]
        assert health[name].get("healthy") == 1.0, (name, health[name])
        entry = next(p for p in answer["status"]["proxies"] if p["name"] == name)
        assert entry["health"] == "healthy" and entry["domain"] == old, entry
    halt = next(c for c in answer["status"]["conditions"] if c["type"] == "RolloutHalted")
    assert "pfl-a, pfl-b failed their health check" in halt["message"], halt
    conditions = rig.status()["conditions"]
    assert not [c for c in conditions if "shutdown" in c["message"] or c["type"] == "RetryPending"]

    git(remote.work, "revert", "--no-edit", "HEAD")
    git(remote.work, "push", "-q", "origin", "HEAD:main")
    assert daemon.hook() == 202
    rig.wait("the new VMs gone", lambda: not set(new) & set(vms(lab, PREFIX)), timeout=900)
    rig.wait("every proxy healthy", rig.all_healthy, timeout=300)
    rig.wait("RolloutHalted gone", lambda: rig.condition("RolloutHalted") is None, 120)
    assert vms(lab, PREFIX) == before


def test_c_a_refused_force_push_keeps_healing_on_the_accepted_revision(rig: Rig) -> None:
    lab, daemon, remote = rig.lab, rig.daemon, rig.remote
    accepted = git(remote.bare, "rev-parse", "main")
    first = git(remote.bare, "rev-list", "--max-parents=0", "main")
    git(remote.work, "push", "-q", "-f", "origin", f"{first}:main")
    assert daemon.hook() == 202
    rig.wait(
        "the refused head on /metrics",
        lambda: [{"revision": first}] == metric(rig, "proxyfleet_source_refused_info"),
        timeout=300,
    )
    before = vms(lab, PREFIX)
    with Gets(rig) as gets:
        t0 = time.monotonic()
        domain, host, runs = kill_qemu(rig, "pfl-c")
        started = started_again(rig, domain, host, runs)
        rig.timings["c: kill -> start seen"] = time.monotonic() - t0
        rig.wait("get to show the start", lambda: bool(gets.restarted("pfl-c")), 120)
    print(f"c: pfl-c started again by run {started} after the kill")
    rig.wait("every proxy healthy", rig.all_healthy, timeout=BOOT)
    assert metric(rig, "proxyfleet_source_revision_info") == [{"revision": accepted}]
    assert metric(rig, "proxyfleet_source_refused_info") == [{"revision": first}]
    stalled = rig.condition("Stalled") or {}
    assert stalled.get("reason") == "SourceRefused", rig.status().get("conditions")
    assert f"accepted revision {accepted[:12]} is applied" in stalled["message"], stalled
    assert vms(lab, PREFIX) == before  # nothing of the older commit was applied
