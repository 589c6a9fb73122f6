"""Day 2 end to end on the lab: the daemon keeps three real proxies serving without commits.

One fleet, one zone, three UEFI proxies (TCG) on the two lab hosts, driven by
``proxyfleet run`` as a process (interval 15 s) pulling a bare git repo, as in
test_e2e_daemon.py. The scenarios share the guests and run in this order, each starting
from what the previous one left:

c. a VM's QEMU process SIGKILLed on its host is started again (same domain, same UUID)
   and serves again, with no commit;
e. the probe endpoint every proxy's probeURL points at stopped on both hosts: every
   proxy fails at once, nothing is replaced past replaceAfterSeconds, ProbePathSuspect is
   in the status; the endpoint back, every proxy is healthy and the condition is gone;
d. squid stopped inside one guest through the guest agent: that proxy is replaced (a new
   domain beside the old one until it is healthy) no sooner than replaceAfterSeconds
   (60 s here) after the stop, while the two others answer every sample through squid;
b. a commit gives every proxy a userData whose squid never starts: the rollout creates
   one new VM (batch 1 of 3), which passes no check by its deadline; RolloutHalted is in the status,
   no second new VM is made, and the three old VMs answer every sample with the old
   version; a revert commit deletes the broken VM and leaves the three old ones serving.
   The daemon runs b with ``replaceTimeoutSeconds: 180`` (restarted for it, as an operator
   would after editing its config, and restarted with REPLACE_TIMEOUT after it): a gate that
   can only fail waits out the whole timeout, and 600 s of it was the lab suite's longest wait;
a. a commit gives the proxies' image key a new url and sha256 (a byte-different copy of the
   lab image, lab.imageupdate.recompressed) and ``policy.rollout: {maxUnavailable: 1,
   maxSurge: 1}``: every proxy gets a new VM in two batches (pfh-a and pfh-b at once, pfh-c
   once both are healthy; why maxSurge 1: the test's docstring), while a sampler that asks
   every leased address every 2 s (lab.answering) never finds fewer than 2 of the 3 proxies
   answering through squid; each new VM's disk backs onto the new content-named base, and
   the old base leaves every host's pool in the run after the rollout. Coming last, it costs
   the rollout alone (two create-to-healthy times, ~5-6 min on a quiet machine).
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import re
import signal
import subprocess
import threading
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from labutil import Sampler, clear_domains, lab_daemon, layout, pool_files, virsh
from test_e2e_daemon import (
    SECRET,
    DaemonProcess,
    Remote,
    free_port,
    git,
    probe_through,
    wait_for,
)

from lab import config as lab_config
from lab import hosts as lab_hosts
from lab import imagebuild, imageupdate
from lab.answering import Answering
from lab.sampling import Periodic
from reconciler.model import Image
from reconciler.model.vm import base_marker_name, base_volume_name

LAB_HOSTS = 2
FLEET = "e2eh"
ZONE = "zone-a"
PROXIES = ("pfh-a", "pfh-b", "pfh-c")
PREFIX = f"pf-{FLEET}-"
IMAGE_KEY = "debian12"
REPLACE_AFTER = 60
INTERVAL = 15
REPLACE_TIMEOUT = 1200
"""The replace timeout (ApplySettings.replace_timeout): how long after its creation a new
VM has to pass a health check before the planner halts its rollout. A create-to-healthy
takes ~3 min here alone (TCG); in
`make test` the other lab stream boots guests on the same two cores and boots take ~3x as
long (this module's setup: 348 s alone, 1076 s in CI), and with 600 s CI once saw scenario
a's pfh-b still booting when its gate ran out. Only a gate that fails waits it out (b has
its own, BROKEN_GATE)."""
BROKEN_GATE = 180
"""Scenario b's replaceTimeoutSeconds: its new VM can never pass a check, so the halt comes
this long after the create (at the next follow-up run) whatever the machine's speed: on a
quiet machine the VM boots
and fails its probes first (~1-3 min); on a loaded one the timeout alone fails it, the same
halt."""
BOOT = 1500.0
"""Seconds for TCG guests to boot to a healthy proxy on shared cores (~2-3 min quiet, far
more while other labs boot guests on the same two cores)."""


# -- the fleet repo -------------------------------------------------------------------


def fleet_yaml(
    lab: dict[str, Any],
    *,
    image: tuple[str, str] | None = None,
    rollout: str = "",
    fleet: str = FLEET,
    zones: Sequence[str] = (),
) -> str:
    """Both lab hosts in one zone, so that the three proxies form one zone. ``image``: the
    url and sha256 of IMAGE_KEY (default: the lab image's); ``rollout``: policy.rollout's
    fields, each ``key: value``; ``zones``: each host's zone, in lab order (default: all
    in ZONE)."""
    url, sha256 = image or (lab["image"]["url"], lab["image"]["sha256"])
    images = (
        f"  images:\n    {IMAGE_KEY}:\n      url: {url}\n      sha256: {sha256}\n"
        "      format: qcow2\n      firmware: uefi\n"
    )
    # maxDeletesPerRun holds per hour across cycles and restarts (the daemon's deletes.json).
    # Scenarios d, b and a replace or delete more than 5 VMs within the hour (c's restarts
    # count none); 5 blocked pfh-c in a's second batch on the first full run.
    policy = "  policy:\n    prune: true\n    maxDeletesPerRun: 20\n"
    if rollout:
        policy += "    rollout:\n" + "".join(f"      {line}\n" for line in rollout.splitlines())
    hosts = "".join(
        f"    - name: {h['name']}\n      address: {h['address']}\n      port: {h['port']}\n"
        f"      user: root\n      zone: {zone}\n      pool: default\n"
        "      network: {bridge: br0}\n      domainType: qemu\n      cpuMode: none\n"
        for h, zone in zip(lab["hosts"], zones or [ZONE] * len(lab["hosts"]), strict=True)
    )
    return (
        f"apiVersion: proxyfleet/v1\nkind: Fleet\nmetadata:\n  name: {fleet}\nspec:\n"
        + images
        + "  machineTypes:\n    small:\n      vcpus: 1\n      memoryMiB: 1024\n      diskGiB: 4\n"
        + "  hosts:\n"
        + hosts
        + policy
    )


def proxy_yaml(
    name: str, probe_url: str, generation: int, *, broken: bool = False, zone: str = ZONE
) -> str:
    """A UEFI proxy whose userData configures, enables and starts squid (the image ships it
    off); its Via header names the proxy and generation. ``broken``: the runcmd names a unit
    that does not exist (a typo), so squid never starts."""
    unit = "squidd" if broken else "squid"
    return (
        "apiVersion: proxyfleet/v1\nkind: Proxy\n"
        f"metadata:\n  name: {name}\n"
        f"spec:\n  placement:\n    zone: {zone}\n    image: {IMAGE_KEY}\n    machineType: small\n"
        "  cloudInit:\n    userData: |\n"
        "      #cloud-config\n"
        "      write_files:\n"
        "        - path: /etc/squid/squid.conf\n"
        "          content: |\n"
        "            http_port 3128\n"
        f"            visible_hostname {via(name, generation)}\n"
        "            acl lab src 10.0.0.0/8\n"
        "            http_access allow localhost\n"
        "            http_access allow lab\n"
        "            http_access deny all\n"
        "            cache deny all\n"
        "            shutdown_lifetime 1 seconds\n"
        "            coredump_dir /var/spool/squid\n"
        "      runcmd:\n"
        f"        - [systemctl, enable, {unit}]\n"
        f"        - [systemctl, restart, {unit}]\n"
        f"  health:\n    probeURL: {probe_url}\n    expectStatus: 204\n    timeoutSeconds: 5\n"
        f"    replaceAfterSeconds: {REPLACE_AFTER}\n"
    )


def via(name: str, generation: int) -> str:
    return f"{name}-g{generation}"


# -- what the hosts run -----------------------------------------------------------------


@dataclass(frozen=True)
class Vm:
    host: str
    uuid: str
    state: str


def vms(lab: dict[str, Any], prefix: str = PREFIX) -> dict[str, Vm]:
    """Every domain of the fleet whose domains start with ``prefix`` on the lab hosts (read
    in their namespaces)."""
    found = {}
    for h in lab["hosts"]:
        for name in virsh(h["name"], "list", "--all", "--name").split():
            if not name.startswith(prefix):
                continue
            try:
                uuid = virsh(h["name"], "domuuid", name).strip()
                state = virsh(h["name"], "domstate", name).strip()
            except lab_hosts.LabError:  # deleted between the listing and the look
                continue
            found[name] = Vm(h["name"], uuid, state)
    return found


def of_proxy(found: dict[str, Vm], proxy: str, prefix: str = PREFIX) -> list[str]:
    return sorted(d for d in found if d.startswith(f"{prefix}{proxy}-"))


def qemu_pid(host: str, domain: str) -> int:
    for proc in lab_hosts.processes_in_netns(layout(host).netns):
        if proc.name.startswith("qemu-system") and f"guest={domain}," in proc.cmdline:
            return proc.pid
    raise AssertionError(f"no QEMU process of {domain} on {host}")


def guest_run(host: str, domain: str, *argv: str, timeout: float = 120) -> dict[str, Any]:
    """Run ``argv`` in the guest through qemu-guest-agent (guest-exec) and wait for it to
    exit: guest-exec-status's answer (exitcode, base64 out-data and err-data)."""
    command = {
        "execute": "guest-exec",
        "arguments": {"path": argv[0], "arg": list(argv[1:]), "capture-output": True},
    }
    started = json.loads(virsh(host, "qemu-agent-command", domain, json.dumps(command)))
    pid = started["return"]["pid"]
    status: dict[str, Any] = {}

    def exited() -> bool:
        nonlocal status
        query = {"execute": "guest-exec-status", "arguments": {"pid": pid}}
        status = json.loads(virsh(host, "qemu-agent-command", domain, json.dumps(query)))["return"]
        return bool(status.get("exited"))

    wait_for(f"{' '.join(argv)} in {domain}", exited, timeout, step=1.0)
    return status


def guest_exec(host: str, domain: str, *argv: str) -> None:
    """Run ``argv`` in the guest, as an operator or a fault would, and wait for it to exit 0."""
    status = guest_run(host, domain, *argv)
    assert status.get("exitcode") == 0, status


GUEST_REPORT = (
    "uptime; cloud-init status --long; systemctl --no-pager status squid cloud-final; "
    "systemd-analyze; systemd-analyze blame | head -12; "
    "journalctl -b --no-pager -u squid -u cloud-final | tail -40"
)
"""What a new VM that failed its gate says of its boot: how far cloud-init got, squid's
unit, where the boot's time went."""


def guest_report(lab: dict[str, Any], domain: str) -> str:
    """GUEST_REPORT from ``domain``'s guest, or why it could not be had (never raises: it
    only explains a failure already found)."""
    found = vms(lab).get(domain)
    if found is None:
        return f"{domain}: no longer defined"
    try:
        status = guest_run(found.host, domain, "/bin/sh", "-c", GUEST_REPORT, timeout=60)
    except (
        AssertionError,
        lab_hosts.LabError,
        subprocess.TimeoutExpired,
        pytest.fail.Exception,  # the guest did not finish the report in time
        KeyError,
        ValueError,
    ) as exc:
        return f"{domain} on {found.host} ({found.state}): no guest report: {exc}"
    out = b"".join(base64.b64decode(status.get(k, "")) for k in ("out-data", "err-data"))
    return f"{domain} on {found.host} ({found.state}):\n{out.decode(errors='replace')}"


def halted_report(lab: dict[str, Any], halted: dict[str, Any]) -> str:
    """The RolloutHalted condition and the report of each new VM its message names."""
    named = re.findall(r"new VM (\S+) passed no health check", str(halted.get("message", "")))
    reports = "\n".join(guest_report(lab, domain) for domain in dict.fromkeys(named))
    return f"the image rollout halted: {halted}\n{reports}"


class Through(Periodic):
    """Requests through the squid of each named proxy every ``interval`` s, in a thread."""

    def __init__(self, targets: dict[str, str], url: str, *, interval: float = 2.0) -> None:
        super().__init__(interval)
        self.targets = dict(targets)
        self.url = url
        self.samples: list[tuple[float, dict[str, tuple[int | None, str]]]] = []

    def look(self) -> None:
        seen = {name: probe_through(ip, self.url) for name, ip in self.targets.items()}
        self.samples.append((time.time(), seen))

    def failures(self, generation: int) -> list[str]:
        """Every sample in which a proxy did not answer 204 with its own ``generation``."""
        return [
            f"{time.strftime('%H:%M:%S', time.gmtime(when))} {name}: {status} {header!r}"
            for when, seen in self.samples
            for name, (status, header) in seen.items()
            if status != 204 or via(name, generation) not in header
        ]


# -- the rig ------------------------------------------------------------------------------


@dataclass
class Rig:
    lab: dict[str, Any]
    remote: Remote
    daemon: DaemonProcess
    state: Path
    timings: dict[str, float] = field(default_factory=dict)
    names: tuple[str, ...] = PROXIES
    """The proxies all_healthy asks about."""
    interval: int = INTERVAL
    """The daemon's ``interval``."""
    extra_config: str = ""
    """More of the daemon's config file (top-level keys, YAML), e.g. its ``dns``."""

    def status(self) -> dict[str, Any]:
        try:
            return self.remote.status()
        except AssertionError:  # no status commit yet
            return {}

    def proxies(self) -> dict[str, dict[str, Any]]:
        return {p["name"]: p for p in self.status().get("proxies", [])}

    def condition(self, kind: str) -> dict[str, Any] | None:
        return next((c for c in self.status().get("conditions", []) if c["type"] == kind), None)

    def all_healthy(self) -> bool:
        proxies = self.proxies()
        return all(
            proxies.get(p, {}).get("health") == "healthy"
            and self.daemon.health_of(p).get("healthy") == 1.0
            for p in self.names
        )

    def history(self) -> dict[str, Any]:
        path = self.state / "history.json"
        return dict(json.loads(path.read_text())) if path.exists() else {}

    def alive(self) -> None:
        assert self.daemon.alive(), f"the daemon exited:\n{self.daemon.log()[-4000:]}"

    def wait(self, what: str, check: Any, timeout: float = BOOT, step: float = 2.0) -> float:
        def done() -> bool:
            self.alive()
            return bool(check())

        return wait_for(what, done, timeout, step=step)

    def finished_after(self, line: str) -> None:
        """Wait until the cycle that logged ``line`` has finished."""

        def finished() -> bool:
            log = self.daemon.log()
            at = log.find(line)
            return at >= 0 and "Reconcile finished" in log[at:]

        self.wait(f"the cycle of {line!r} to finish", finished, timeout=REPLACE_TIMEOUT + 600)

    def configure(self, replace_timeout: int) -> None:
        """Write the daemon's config file, read when it starts."""
        bare, tmp = self.remote.bare, self.daemon.workdir
        self.daemon.config.write_text(
            f"repo:\n  url: file://{bare}\n  branch: main\n"
            f"interval: {self.interval}\njitter: 0\n"
            f'listen: "127.0.0.1:{self.daemon.port}"\n'
            f"webhook:\n  secretFile: {tmp / 'hook-secret'}\n"
            f"ssh:\n  keyFile: {self.lab['sshKey']}\n"
            f"  knownHostsFile: {self.lab['knownHosts']}\n"
            f"replaceTimeoutSeconds: {replace_timeout}\n"
            "log:\n  level: info\n"
            f"stateDir: {self.state}\n" + self.extra_config
        )

    def restart(self, replace_timeout: int) -> None:
        """Stop the daemon as systemd does (SIGTERM; it finishes its cycle first) and start
        it again with ``replace_timeout``. Its state directory (history, deletes) stays."""
        self.alive()
        assert self.daemon.proc is not None
        self.daemon.signal(signal.SIGTERM)
        assert self.daemon.proc.wait(timeout=REPLACE_TIMEOUT + 300) == 0, self.daemon.log()
        self.configure(replace_timeout)
        self.daemon.start()

    def halted_saying(self, text: str) -> None:
        """Wait for a RolloutHalted condition whose message holds ``text``: a broken
        rollout's halt, BROKEN_GATE after its new VMs' creation, however slow their boot."""
        self.wait(
            f"RolloutHalted saying {text!r}",
            lambda: text in (self.condition("RolloutHalted") or {}).get("message", ""),
            timeout=BROKEN_GATE + BOOT,
        )

    def cycle(self) -> None:
        """Wait until a cycle that starts after now has finished."""
        self.alive()
        started = self.daemon.log().count("Reconcile started")
        self.wait(
            "a whole cycle",
            lambda: self.daemon.log().count("Reconcile finished") > started,
            timeout=REPLACE_TIMEOUT + 600,
        )


@pytest.fixture(scope="module")
def rig(lab: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rig]:
    files: dict[str, str | None] = {"fleet.yaml": fleet_yaml(lab)}
    for name in PROXIES:
        files[f"proxies/{name}.yaml"] = proxy_yaml(name, lab["probeUrl"], 1)
    tmp = tmp_path_factory.mktemp("day2-e2e")
    with running_rig(lab, tmp, "Three proxies in one zone", files, names=PROXIES) as rig:
        yield rig


@contextlib.contextmanager
def running_rig(
    lab: dict[str, Any],
    tmp: Path,
    message: str,
    files: dict[str, str | None],
    *,
    names: tuple[str, ...],
    interval: int = INTERVAL,
    extra_config: str = "",
) -> Iterator[Rig]:
    """A bare repo with ``files`` committed, and the daemon (REPLACE_TIMEOUT) pulling it,
    once every proxy of ``names`` is healthy; its timings and log tail printed at the end.
    ``interval`` and ``extra_config``: the daemon's (Rig's fields of those names)."""
    # A lab session shares its hosts across modules: VMs that earlier ones left (another
    # fleet's) would keep every base of their host (no base is removed on a host where
    # another fleet runs VMs), and the CPU they take slows every boot here.
    for h in lab["hosts"]:
        if left := clear_domains(h["name"]):
            print(f"{h['name']}: removed {', '.join(left)}, left by earlier modules")
    bare, work = tmp / "fleet.git", tmp / "operator"
    git(tmp, "init", "-q", "--bare", "-b", "main", str(bare))
    git(tmp, "clone", "-q", str(bare), str(work))
    git(work, "checkout", "-q", "-b", "main")
    remote = Remote(bare, work)
    remote.push(message, files)

    (tmp / "hook-secret").write_bytes(SECRET + b"\n")
    env = {k: v for k, v in os.environ.items() if k not in ("NOTIFY_SOCKET", "WATCHDOG_USEC")}
    daemon = DaemonProcess(tmp / "proxyfleet.yaml", free_port(), tmp, env)
    rig = Rig(
        lab,
        remote,
        daemon,
        tmp / "state",
        names=names,
        interval=interval,
        extra_config=extra_config,
    )
    rig.configure(REPLACE_TIMEOUT)
    started = time.monotonic()
    daemon.start()
    try:
        rig.timings[f"{len(names)} proxies healthy"] = rig.wait("healthy proxies", rig.all_healthy)
        yield rig
    finally:  # a setup that failed or was interrupted leaves no daemon behind
        for h in lab["hosts"]:  # scenario e may have left a probe endpoint stopped
            lab_daemon("start", "probe", h["name"])
        daemon.stop_now()
    rig.timings["module"] = time.monotonic() - started
    print("timings: " + ", ".join(f"{k} {v:.0f}s" for k, v in rig.timings.items()))
    print(f"--- daemon log tail:\n{daemon.log()[-6000:]}")


# -- the scenarios, in file order on the same guests --------------------------------------


def test_c_a_killed_vm_is_started_again_without_a_commit(rig: Rig) -> None:
    lab, daemon = rig.lab, rig.daemon
    head = git(rig.remote.bare, "rev-parse", "main")
    before = vms(lab)
    assert sorted(before) == sorted(d for p in PROXIES for d in of_proxy(before, p))
    assert [len(of_proxy(before, p)) for p in PROXIES] == [1, 1, 1], before
    assert all(vm.state == "running" for vm in before.values()), before
    proxy = rig.proxies()["pfh-a"]
    domain, host = proxy["domain"], proxy["host"]
    t0 = time.monotonic()
    pid = qemu_pid(host, domain)
    os.kill(pid, signal.SIGKILL)
    # libvirt sees the domain shut off because QEMU crashed (until the daemon starts it).
    states = []
    for _ in range(50):
        states.append(virsh(host, "domstate", "--reason", domain).strip())
        if states[-1] == "shut off (crashed)":
            break
        time.sleep(0.2)
    print(f"{domain} after SIGKILL: {states}")
    assert "shut off (crashed)" in states, states

    def serving_again() -> bool:
        status, header = probe_through(proxy["ip"], lab["probeUrl"])
        return status == 204 and via("pfh-a", 1) in header

    rig.timings["c: killed -> started"] = rig.wait(
        "the start of the killed VM",
        lambda: f"Start of {domain} on {host} succeeded" in daemon.log(),
        timeout=300,
    )
    rig.wait("the killed VM serving again", serving_again)
    # The cycle that started it checks it until it is healthy; its status is the first to count.
    rig.finished_after(f"Start of {domain} on {host} succeeded")
    rig.wait("the status to say healthy", rig.all_healthy, timeout=300)
    rig.timings["c: killed -> healthy"] = time.monotonic() - t0
    after = vms(lab)
    assert after == before, (before, after)  # same domains, same UUIDs, all running
    assert git(rig.remote.bare, "rev-parse", "main") == head  # no commit did it
    assert "Replace of" not in daemon.log()
    assert qemu_pid(host, domain) != pid
    record = next(v for v in rig.history()["vms"] if v["domain"] == domain)
    assert len(record["restarts"]) == 1 and record["failingSince"] is None, record


def test_e_a_probe_path_broken_for_every_proxy_replaces_nothing(rig: Rig) -> None:
    lab, daemon = rig.lab, rig.daemon
    before = vms(lab)
    ips = {name: p["ip"] for name, p in rig.proxies().items()}
    t0 = time.monotonic()
    for h in lab["hosts"]:
        lab_daemon("stop", "probe", h["name"])
    assert all(probe_through(ip, lab["probeUrl"])[0] != 204 for ip in ips.values())

    def failing_long_enough() -> bool:
        records = {v["domain"]: v for v in rig.history().get("vms", [])}
        since = [records.get(d, {}).get("failingSince") for d in before]
        if None in since:
            return False
        youngest = min(time.time() - _epoch(s) for s in since if s)
        return youngest > REPLACE_AFTER + 2 * INTERVAL

    rig.wait("every proxy failing past replaceAfterSeconds", failing_long_enough, timeout=600)
    rig.cycle()  # a whole cycle planned with all three past replaceAfterSeconds
    suspect = rig.condition("ProbePathSuspect")
    assert suspect is not None and suspect["status"] == "True", rig.status().get("conditions")
    assert ZONE in suspect["message"], suspect
    assert vms(lab) == before, "a proxy was replaced or touched while the probe path was down"
    assert "Replace of" not in daemon.log()
    assert all(p["health"] == "unhealthy" for p in rig.proxies().values()), rig.proxies()
    rig.timings["e: probe down, held"] = time.monotonic() - t0

    for h in lab["hosts"]:
        lab_daemon("start", "probe", h["name"])
    rig.wait("every proxy healthy again", rig.all_healthy, timeout=300)
    rig.wait("ProbePathSuspect gone", lambda: rig.condition("ProbePathSuspect") is None, 120)
    assert vms(lab) == before
    assert "Replace of" not in daemon.log()
    rig.timings["e: total"] = time.monotonic() - t0


def _epoch(iso: str) -> float:
    return datetime.fromisoformat(iso).timestamp()


def test_d_squid_stopped_in_a_guest_gets_that_proxy_replaced(rig: Rig) -> None:
    lab, daemon = rig.lab, rig.daemon
    before = vms(lab)
    proxies = rig.proxies()
    victim = proxies["pfh-b"]
    old, host = victim["domain"], victim["host"]
    others = {n: p["ip"] for n, p in proxies.items() if n != "pfh-b"}
    domain_samples: list[tuple[float, dict[str, Vm]]] = []
    sampling = threading.Event()

    def sample_domains() -> None:
        while not sampling.is_set():
            with contextlib.suppress(lab_hosts.LabError):
                domain_samples.append((time.time(), vms(lab)))
            sampling.wait(2.0)

    sampler = threading.Thread(target=sample_domains, daemon=True)
    with Through(others, lab["probeUrl"]) as through:
        sampler.start()
        stopped = time.time()
        guest_exec(host, old, "/bin/systemctl", "stop", "squid")
        assert probe_through(victim["ip"], lab["probeUrl"])[0] != 204
        rig.wait(
            "pfh-b replaced",
            lambda: (
                of_proxy(vms(lab), "pfh-b") not in ([old], [])
                and old not in vms(lab)
                and rig.proxies()["pfh-b"]["domain"] != old
                and rig.proxies()["pfh-b"]["health"] == "healthy"
            ),
        )
        sampling.set()
        sampler.join(timeout=60)
    rig.timings["d: squid stopped -> replaced"] = time.time() - stopped
    after = vms(lab)
    new = of_proxy(after, "pfh-b")
    assert len(new) == 1 and new[0] != old, after
    new_domain = new[0]
    # Create before destroy: the new VM existed while the old one still ran.
    first_new = next(t for t, seen in domain_samples if new_domain in seen)
    assert any(
        new_domain in seen and seen.get(old, Vm("", "", "")).state == "running"
        for _, seen in domain_samples
    ), "the old VM did not run beside the new one"
    assert first_new - stopped >= REPLACE_AFTER, (
        f"replaced {first_new - stopped:.0f} s after squid stopped"
    )
    log = daemon.log()
    assert f"Replace of {old} by {new_domain}" in log, log[-4000:]
    # Within the replace, or (when the new VM needed longer than the replace timeout, which
    # halts the revision's rollout) in a later cycle, whose delete waits for the same check.
    healthy = re.search(rf"VM {new_domain}( on \S+)? is healthy at", log)
    deleted = log.find(f"deleted domain {old}")
    assert healthy is not None and 0 <= healthy.start() < deleted, log[-4000:]
    assert through.samples and through.failures(1) == [], through.failures(1)[:20]
    status, header = probe_through(rig.proxies()["pfh-b"]["ip"], lab["probeUrl"])
    assert status == 204 and via("pfh-b", 1) in header, header
    for name in ("pfh-a", "pfh-c"):
        assert of_proxy(after, name) == of_proxy(before, name)
        assert after[of_proxy(after, name)[0]] == before[of_proxy(before, name)[0]]
    print(f"d: new VM first seen {first_new - stopped:.0f} s after squid stopped")


def test_b_a_broken_rollout_halts_after_its_first_batch_and_a_revert_recovers(
    rig: Rig,
) -> None:
    lab, daemon, remote = rig.lab, rig.daemon, rig.remote
    before = vms(lab)
    ips = {n: p["ip"] for n, p in rig.proxies().items()}
    assert len(before) == 3, before
    rig.restart(BROKEN_GATE)
    t0 = time.monotonic()
    with Through(ips, lab["probeUrl"]) as through:
        remote.push(
            "Every proxy: a squid unit name with a typo",
            {f"proxies/{n}.yaml": proxy_yaml(n, lab["probeUrl"], 2, broken=True) for n in PROXIES},
        )
        assert daemon.hook() == 202
        # A halt of an earlier revision (d's, on a slow machine) does not count.
        rig.halted_saying("pfh-a failed its health check")
        rig.timings["b: commit -> halted"] = time.monotonic() - t0
        halted = vms(lab)
        rig.cycle()  # a cycle of the halted revision plans no further replace
        rig.cycle()
        still = vms(lab)
    new = sorted(set(halted) - set(before))
    assert len(new) == 1, halted  # batch 1 only
    broken = new[0]
    assert broken.startswith(f"{PREFIX}pfh-a-"), broken  # batch order: by proxy name
    assert set(before) <= set(halted) and set(still) == set(halted), (before, halted, still)
    condition = rig.condition("RolloutHalted")
    assert condition is not None and "pfh-a" in condition["message"], condition
    # What scenario a's test says if its rollout halts: the report of the named guest
    # (which may still be booting here: the gate is short).
    report = halted_report(lab, condition)
    print(f"b: {report}")
    assert f"\n{broken} on " in report, report
    log = daemon.log()
    # The run that made the new VM returned at once; a later run's plan read its deadline.
    made = f"Replace of {rig_old(before, 'pfh-a')} by {broken} on "
    assert re.search(re.escape(made) + r"\S+ succeeded", log), log[-4000:]
    assert "halted: pfh-a failed its health check" in log, log[-4000:]
    for name in ("pfh-b", "pfh-c"):  # batches 2 and 3 never started
        assert f"Replace of {rig_old(before, name)}" not in log, log[-4000:]
    assert through.samples and through.failures(1) == [], through.failures(1)[:20]

    t1 = time.monotonic()
    git(remote.work, "revert", "--no-edit", "HEAD")
    git(remote.work, "push", "-q", "origin", "HEAD:main")
    assert daemon.hook() == 202
    rig.wait("the broken VM gone", lambda: broken not in vms(lab), timeout=900)
    rig.wait("every proxy healthy", rig.all_healthy, timeout=300)
    rig.wait("RolloutHalted gone", lambda: rig.condition("RolloutHalted") is None, 120)
    rig.timings["b: revert -> recovered"] = time.monotonic() - t1
    assert vms(lab) == before
    for name, proxy in rig.proxies().items():
        status, header = probe_through(proxy["ip"], lab["probeUrl"])
        assert status == 204 and via(name, 1) in header, (name, header)
    rig.restart(REPLACE_TIMEOUT)  # scenario a's new VMs get the whole timeout


def rig_old(found: dict[str, Vm], proxy: str) -> str:
    return of_proxy(found, proxy)[0]


ROLLOUT = "maxUnavailable: 1\nmaxSurge: 1"
"""Scenario a's policy.rollout: batches of maxSurge + maxUnavailable = 2 of the 3 proxies."""


def test_a_an_image_update_rolls_over_every_proxy_with_at_most_one_unavailable(
    rig: Rig,
) -> None:
    """One commit gives IMAGE_KEY a new url and sha256 (a byte-different copy of the lab
    image, made once and cached beside it, so a cold image directory can make it) and
    ``policy.rollout: {maxUnavailable: 1, maxSurge: 1}``.

    maxSurge 1 makes batches of 2 (surge + unavailable) of the 3 proxies: two places, the
    third replace started only in the plan that deletes an old VM of the first two (its new
    VM healthy), and two replaces in flight at once, so a rollout that took an old VM away
    before its successor served would drop to N - 2 and fail the N - 1 floor. With
    maxSurge 0 the batches hold one replace: a third create-to-healthy time (~3 min), and
    a one-at-a-time rollout never goes below N - 1 whatever it does, so the floor would
    prove less; with maxSurge 2 or more, all three roll at once and no pacing is seen."""
    lab, daemon, remote = rig.lab, rig.daemon, rig.remote
    t0 = time.monotonic()
    source = imagebuild.cached(lab_config.IMAGES_DIR)
    assert source is not None and str(source.path) == lab["image"]["path"], lab["image"]
    copy = imageupdate.recompressed(source)
    rig.timings["a: second image"] = time.monotonic() - t0
    new_url = lab["imageServer"].rstrip("/") + "/" + copy.path.name
    old_base = base_volume_name(
        Image(key=IMAGE_KEY, url=lab["image"]["url"], sha256=lab["image"]["sha256"])
    )
    new_base = base_volume_name(Image(key=IMAGE_KEY, url=new_url, sha256=copy.sha256))
    hosts = [h["name"] for h in lab["hosts"]]
    before = vms(lab)
    assert len(before) == len(PROXIES), before
    for host in {vm.host for vm in before.values()}:
        assert old_base in pool_files(host) and new_base not in pool_files(host), host
    leases = [layout(host).leases for host in hosts]
    serving = re.compile(rf"\b({'|'.join(map(re.escape, PROXIES))})-g1\b")
    answering = Answering(leases, lab["probeUrl"], serving, timeout=10.0)
    listed = [Sampler(host, interval=2.0) for host in hosts]  # running domains

    def rolled() -> bool:
        halted = rig.condition("RolloutHalted")
        assert halted is None, halted_report(lab, halted)
        found = vms(lab)
        new = [of_proxy(found, p) for p in PROXIES]
        if any(len(d) != 1 or d[0] in before for d in new):
            return False
        proxies = rig.proxies()
        return rig.all_healthy() and all(
            proxies[p]["domain"] == d[0] for p, d in zip(PROXIES, new, strict=True)
        )

    with contextlib.ExitStack() as stack:
        stack.enter_context(contextlib.closing(answering))
        stack.enter_context(answering)
        for sampler in listed:
            stack.enter_context(sampler)
        rig.wait(
            "the sampler to see every proxy answer",
            lambda: bool(answering.samples) and len(answering.samples[-1][1]) == len(PROXIES),
            timeout=120,
        )
        committed = time.time()
        remote.push(
            f"{IMAGE_KEY}: a new image ({copy.sha256[:12]}), rolled one unavailable at most",
            {"fleet.yaml": fleet_yaml(lab, image=(new_url, copy.sha256), rollout=ROLLOUT)},
        )
        assert daemon.hook() == 202
        rig.wait("every proxy on a new VM", rolled, timeout=2 * REPLACE_TIMEOUT + 300, step=5)
    rig.timings["a: commit -> rolled"] = time.time() - committed
    counts = [len(seen) for when, seen in answering.samples if when >= committed]
    print(
        f"a: {len(counts)} samples after the commit, least answering {min(counts, default=0)} "
        f"of {len(PROXIES)}"
    )
    assert len(counts) >= 10, counts
    assert min(counts) >= len(PROXIES) - 1, [
        (time.strftime("%H:%M:%S", time.gmtime(when)), sorted(seen))
        for when, seen in answering.samples
        if when >= committed and len(seen) < len(PROXIES) - 1
    ]

    after = vms(lab)
    new = {p: of_proxy(after, p)[0] for p in PROXIES}
    assert sorted(after) == sorted(new.values()), after
    for domain in new.values():
        assert after[domain].state == "running", after
        assert backing_base(after[domain].host, domain) == new_base, domain
    # Paced: batch 1 (pfh-a, pfh-b: by proxy name) ran at once; pfh-c, the third, took a
    # place only when one was free: in the run that deleted an old VM of batch 1 (its new VM
    # had passed a check), not before. A listing is stamped when it is in, so a domain's
    # first listing is no earlier than its start.
    log = daemon.log()
    # Each old VM goes in a later run than its successor's create, once a check passed:
    # the delete looks at the new VM once more and logs it healthy.
    healthy = {p: logged_at(log, f"VM {new[p]} on ", "is healthy at") for p in PROXIES}
    first = {
        p: min(when for s in listed for when, seen in s.samples if new[p] in seen) for p in PROXIES
    }
    assert max(first["pfh-a"], first["pfh-b"]) < min(healthy["pfh-a"], healthy["pfh-b"]), (
        first,
        healthy,
    )
    made_c = run_of(log, "Replace of ", f" by {new['pfh-c']} on ")
    freed = min(run_of(log, f"Delete of {of_proxy(before, p)[0]} on ") for p in PROXIES[:2])
    assert made_c >= freed, (made_c, freed)
    assert first["pfh-c"] > max(first["pfh-a"], first["pfh-b"]), first

    t1 = time.monotonic()
    rig.wait(  # removed by the first run that sees no overlay on it (the one after the rollout)
        f"{old_base} gone from every host",
        lambda: all(
            not {old_base, base_marker_name(old_base)} & pool_files(host) for host in hosts
        ),
        timeout=20 * INTERVAL,
        step=5,
    )
    rig.timings["a: rolled -> old base gone"] = time.monotonic() - t1
    # The host's own line per volume (logfmt quotes the message): the base itself went.
    assert f'deleted unused base volume {old_base}"' in daemon.log(), daemon.log()[-4000:]
    for name, proxy in rig.proxies().items():
        status, header = probe_through(proxy["ip"], lab["probeUrl"])
        assert status == 204 and via(name, 1) in header, (name, header)
    rig.timings["a: total"] = time.monotonic() - t0
    print(f"a: scenario took {rig.timings['a: total']:.0f} s")


def backing_base(host: str, domain: str) -> str:
    """The file name the backing chain of ``domain``'s disk ends in, read through virsh."""
    rows = [line.split() for line in virsh(host, "domblklist", "--details", domain).splitlines()]
    disk = next(row[3] for row in rows if len(row) >= 4 and row[1] == "disk")
    path = disk
    for _ in range(8):
        found = ET.fromstring(virsh(host, "vol-dumpxml", path)).findtext("backingStore/path")
        if not found:
            return Path(path).name
        path = found
    raise AssertionError(f"the disk of {domain} has a backing chain longer than 8")


def run_of(log: str, text: str, *more: str) -> int:
    """The run number (logfmt ``run=N``) of the first daemon log line that contains ``text``
    (and each of ``more``)."""
    for line in log.splitlines():
        if text in line and all(m in line for m in more):
            found = re.search(r"\brun=(\d+)", line)
            assert found is not None, line
            return int(found.group(1))
    raise AssertionError(f"no daemon log line contains {text!r}:\n{log[-4000:]}")


def logged_at(log: str, text: str, *more: str) -> float:
    """Epoch seconds of the first daemon log line (logfmt) that contains ``text`` (and each
    of ``more``)."""
    for line in log.splitlines():
        if text in line and all(m in line for m in more):
            stamp = line.split(" ", 1)[0].removeprefix("time=")
            when = datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)
            return when.timestamp()
    raise AssertionError(f"no daemon log line contains {text!r}:\n{log[-4000:]}")
