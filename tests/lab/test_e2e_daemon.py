"""End to end on the lab: ``proxyfleet run`` as a process, driven only by git commits.

A bare git repo (file://) holds a fleet rendered for this lab instance's hosts. The daemon
runs as a subprocess with its own state dir, listen port, webhook secret and the lab's SSH
key and known_hosts. One test, in phases, so that only two VMs boot:

1. an empty fleet: the daemon's first cycle commits a status, /healthz answers 200;
2. a commit adds a proxy and a signed webhook follows; once the create has made its first
   volume on the host the daemon gets SIGKILL; a restarted daemon completes the create:
   exactly one owned domain, no orphan volume, the VM relays the lab probe, the status
   branch gains a commit describing it and /metrics shows it healthy;
3. a commit changes the proxy's userData; the daemon gets SIGKILL once the replacement's
   first volume exists, and another userData change is committed before the restart: the
   killed create's volumes are cleaned up, a VM of the newest userData is created and the
   old one is deleted only after the new one passed its health check (both exist while the
   new one boots). The newest userData names a secret (``${secret:squid-tag}``, an
   age-encrypted file committed with it, decrypted with the identity of the daemon
   config's ``secrets.ageIdentityFile``): the new squid's ``Via`` carries the value, and
   the seed on the host holds it, while the daemon's DEBUG log, the status branch
   (status.yaml, STATUS.md, commit messages), /metrics, the daemon's state files and a
   ``proxyfleet plan`` (text and JSON) made meanwhile never show it;
4. a commit removes the manifest: the VM, its overlay, seed and NVRAM are gone;
5. SIGTERM: the daemon exits 0 and leaves no bridge socket behind.

The proxy lives on the lab's Debian 13 host (libvirt 11, QEMU 10; issue 14): the other
daemon scenarios (tests/lab/test_e2e_standby.py, test_e2e_day2.py) run against Debian 12's
libvirt 9.0, so the daemon is proven on both. Each host's libvirt and QEMU versions are
printed.

Host names, addresses, key, known_hosts and image URL come from the lab's own files, so the
module runs in any lab instance (PROXYFLEET_LAB_INSTANCE).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from ruamel.yaml import YAML
from secretutil import make_identity, write_secret

from lab import config as lab_config

LAB_HOSTS = 2
LAB_DEBIAN13 = 1
"""Host 2 is a Debian 13 hypervisor; the proxy is placed in its zone."""
FLEET = "e2ed"
PROXY = "pfd-a"
PREFIX = f"pf-{FLEET}-{PROXY}-"
STATUS_BRANCH = "proxyfleet-status"
SECRET = b"lab-hook-secret"
CANARY = f"canary-{uuid.uuid4().hex[:16]}"
"""The value of the fleet's one age secret: unique per run, searched for in every output."""
NAMESPACE = "urn:proxyfleet:instance:v1"
POOL_DIR = "/var/lib/libvirt/images"
NVRAM_DIR = "/var/lib/libvirt/qemu/nvram"
CONVERGE_TIMEOUT = 1200.0
"""Seconds for one boot to a healthy proxy under TCG on shared cores: ~100 s on a quiet
machine, 6 to 14 minutes while other labs boot dozens of guests on the same two cores."""


# -- the fleet repo ---------------------------------------------------------------------


def git(cwd: Path, *args: str) -> str:
    proc = subprocess.run(
        ["git", "-c", "user.name=Operator", "-c", "user.email=operator@lab.test", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, f"git {' '.join(args)}: {proc.stderr}"
    return proc.stdout.strip()


def indented(snippet: Path) -> str:
    """A lab snippet (``hosts:`` / ``images:`` after a comment line) under ``spec:``."""
    lines = [ln for ln in snippet.read_text().splitlines() if not ln.startswith("#")]
    return "".join(f"  {line}\n" for line in lines)


def fleet_yaml() -> str:
    return (
        f"apiVersion: proxyfleet/v1\nkind: Fleet\nmetadata:\n  name: {FLEET}\nspec:\n"
        + indented(lab_config.IMAGES_YAML)
        + "  machineTypes:\n    small:\n      vcpus: 1\n      memoryMiB: 1024\n      diskGiB: 4\n"
        + indented(lab_config.HOSTS_YAML)
        + "  policy:\n    prune: true\n    maxDeletesPerRun: 5\n    allowEmpty: true\n"
    )


def proxy_yaml(zone: str, probe_url: str, generation: int, *, secret: str = "") -> str:
    """A UEFI proxy whose userData configures, enables and starts squid itself (the lab image
    ships it off, with Debian's config that denies the lab's clients). Its ``Via`` header
    names the generation, so a probe shows which userData the serving VM runs; with
    ``secret``, followed by that secret's value (``${secret:NAME}``)."""
    name = via(generation) + (f"-${{secret:{secret}}}" if secret else "")
    return (
        "apiVersion: proxyfleet/v1\nkind: Proxy\n"
        f"metadata:\n  name: {PROXY}\n"
        f"spec:\n  placement:\n    zone: {zone}\n    image: debian12\n    machineType: small\n"
        "  cloudInit:\n    userData: |\n"
        "      #cloud-config\n"
        "      write_files:\n"
        "        - path: /etc/squid/squid.conf\n"
        "          content: |\n"
        "            http_port 3128\n"
        f"            visible_hostname {name}\n"
        "            acl lab src 10.0.0.0/8\n"
        "            http_access allow localhost\n"
        "            http_access allow lab\n"
        "            http_access deny all\n"
        "            cache deny all\n"
        "            coredump_dir /var/spool/squid\n"
        "      runcmd:\n"
        "        - [systemctl, enable, squid]\n"
        "        - [systemctl, restart, squid]\n"
        f"  health:\n    probeURL: {probe_url}\n    expectStatus: 204\n    timeoutSeconds: 10\n"
    )


def via(generation: int) -> str:
    return f"{PROXY}-g{generation}"


@dataclass
class Remote:
    """The bare repo the daemon pulls from, and the operator's clone that pushes to it."""

    bare: Path
    work: Path

    def push(self, message: str, files: dict[str, str | None], *, added: Iterable[str] = ()) -> str:
        """Commit ``files`` (None: remove it) and the already written ``added``; push."""
        for name, text in files.items():
            path = self.work / name
            if text is None:
                git(self.work, "rm", "-q", name)
                continue
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            git(self.work, "add", name)
        for name in added:
            git(self.work, "add", name)
        git(self.work, "commit", "-q", "-m", message)
        git(self.work, "push", "-q", "origin", "HEAD:main")
        return git(self.work, "rev-parse", "HEAD")

    def status_commits(self) -> int:
        try:
            return len(git(self.bare, "log", "--format=%H", STATUS_BRANCH).splitlines())
        except AssertionError:
            return 0

    def status(self) -> dict[str, Any]:
        text = git(self.bare, "show", f"{STATUS_BRANCH}:.proxyfleet/status.yaml")
        loaded = YAML(typ="safe", pure=True).load(text)
        assert isinstance(loaded, dict)
        return loaded


# -- the lab hosts, as an operator sees them ------------------------------------------


@dataclass(frozen=True)
class LabHost:
    name: str
    address: str
    zone: str
    subnet: str
    key: str
    known_hosts: str

    def sh(self, command: str) -> str:
        proc = subprocess.run(
            [
                "ssh",
                "-i",
                self.key,
                "-o",
                f"UserKnownHostsFile={self.known_hosts}",
                "-o",
                "StrictHostKeyChecking=yes",
                "-o",
                "BatchMode=yes",
                f"root@{self.address}",
                command,
            ],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        return proc.stdout

    def pool_on_disk(self) -> Path:
        """The host's storage pool as this machine's file system holds it (cheap to poll)."""
        layout = lab_config.HostLayout.from_name(self.name)
        assert layout is not None, (
            f"{self.name} is not a host of lab instance {lab_config.INSTANCE}"
        )
        return layout.state / "var-lib-libvirt" / "images"

    def world(self) -> World:
        """Domains (name -> state, owned?), pool volumes and NVRAM files, in one SSH call."""
        out = self.sh(
            "for d in $(virsh -q -c qemu:///system list --all --name); do "
            's=$(virsh -c qemu:///system domstate $d 2>/dev/null | head -1 | tr " " _); '
            f"o=$(virsh -c qemu:///system metadata $d --uri {NAMESPACE} >/dev/null 2>&1 "
            "&& echo owned || echo foreign); "
            'echo "dom $d ${s:-gone} $o"; done; '
            f"for f in $(ls {POOL_DIR}); do echo vol $f; done; "
            f"for f in $(ls {NVRAM_DIR}); do echo nvram $f; done"
        )
        world = World()
        for line in out.splitlines():
            kind, _, rest = line.partition(" ")
            if kind == "dom":
                name, state, owner = rest.split()
                if state != "gone":  # deleted between the listing and the look
                    world.domains[name] = (state, owner == "owned")
            elif kind == "vol":
                world.volumes.append(rest)
            elif kind == "nvram":
                world.nvram.append(rest)
        return world


@dataclass
class World:
    domains: dict[str, tuple[str, bool]] = field(default_factory=dict)
    volumes: list[str] = field(default_factory=list)
    nvram: list[str] = field(default_factory=list)

    def ours(self) -> list[str]:
        return sorted(d for d in self.domains if d.startswith(PREFIX))

    def leaks(self) -> list[str]:
        """Volumes and NVRAM files that belong to no domain: what a crash must not leave."""
        found = [
            f"volume {v}"
            for v in self.volumes
            if not v.startswith("base-")
            and v.removesuffix(".qcow2").removesuffix("-seed.iso") not in self.domains
        ]
        found += [
            f"nvram {n}" for n in self.nvram if n.removesuffix("_VARS.fd") not in self.domains
        ]
        return found


def probe_through(ip: str, url: str) -> tuple[int | None, str]:
    """GET ``url`` through the squid at ``ip``: the status and squid's ``Via`` header."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({"http": f"http://{ip}:3128"}))
    try:
        with opener.open(url, timeout=10) as resp:
            return int(resp.status), resp.headers.get("Via", "")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers.get("Via", "")
    except OSError:
        return None, ""


# -- the daemon process -----------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class DaemonProcess:
    """``proxyfleet run --config FILE`` as a child process; each start logs to its own file."""

    config: Path
    port: int
    workdir: Path
    env: dict[str, str]
    proc: subprocess.Popen[bytes] | None = None
    log_file: Path | None = None
    starts: int = 0

    def start(self) -> None:
        self.starts += 1
        self.log_file = self.workdir / f"daemon-{self.starts}.log"
        # The SSH bridges' sockets go here, as under systemd's RuntimeDirectory.
        self.runtime_dir.mkdir(mode=0o700)
        env = {**self.env, "RUNTIME_DIRECTORY": str(self.runtime_dir)}
        with self.log_file.open("wb") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "reconciler", "run", "--config", str(self.config)],
                stdout=subprocess.DEVNULL,
                stderr=err,
                env=env,
            )
        wait_for(
            "the daemon to listen",
            lambda: "Listening on" in self.log() or not self.alive(),
            60,
            step=0.1,
        )
        assert self.alive(), self.log()

    @property
    def runtime_dir(self) -> Path:
        return self.workdir / f"run-{self.starts}"

    def log(self) -> str:
        return self.log_file.read_text() if self.log_file is not None else ""

    def cycles(self) -> int:
        """Cycles finished by this run of the daemon."""
        return self.log().count("Reconcile finished")

    def idle(self) -> bool:
        """No cycle running: every one started has finished."""
        log = self.log()
        return log.count("Reconcile started") == log.count("Reconcile finished")

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def get(self, path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(self.url(path), timeout=10) as resp:
                return int(resp.status), resp.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()

    def hook(self) -> int:
        """POST /hook the way a git server does, signed with the shared secret."""
        body = b'{"ref": "refs/heads/main"}'
        signature = "sha256=" + hmac.new(SECRET, body, hashlib.sha256).hexdigest()
        request = urllib.request.Request(
            self.url("/hook"),
            data=body,
            headers={"X-Hub-Signature-256": signature, "Content-Type": "application/json"},
            method="POST",
        )
        try:
            with urllib.request.urlopen(request, timeout=10) as resp:
                return int(resp.status)
        except urllib.error.HTTPError as exc:
            return exc.code

    def health_of(self, proxy: str) -> dict[str, float]:
        """``proxyfleet_proxy_health`` of one proxy by health label, from /metrics."""
        _, text = self.get("/metrics")
        values: dict[str, float] = {}
        for family in text_string_to_metric_families(text):
            if family.name == "proxyfleet_proxy_health":
                for sample in family.samples:
                    if sample.labels.get("proxy") == proxy:
                        values[sample.labels["health"]] = sample.value
        return values

    def signal(self, sig: signal.Signals) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)

    def stop_now(self) -> None:
        if self.alive():
            assert self.proc is not None
            self.proc.kill()
            self.proc.wait(timeout=30)


def wait_for(what: str, check: Callable[[], bool], timeout: float, step: float = 1.0) -> float:
    """Seconds until ``check()`` held; fails the test naming ``what`` on timeout."""
    started = time.monotonic()
    while not check():
        if time.monotonic() - started > timeout:
            pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(step)
    return time.monotonic() - started


def converge(daemon: DaemonProcess, what: str, check: Callable[[], bool]) -> float:
    """Wait for ``check``; a cycle that ends without it gets a webhook for one more.

    The daemon's interval is long, so a cycle that finished too early (a VM it kept while
    it was still booting is looked at once) would otherwise be the last for an hour.
    """
    seen, hooked = daemon.cycles(), time.monotonic()

    def done() -> bool:
        nonlocal seen, hooked
        assert daemon.alive(), f"the daemon exited:\n{daemon.log()[-4000:]}"
        if check():
            return True
        if daemon.cycles() > seen and daemon.idle() and time.monotonic() - hooked > 10:
            seen, hooked = daemon.cycles(), time.monotonic()
            assert daemon.hook() == 202
        return False

    return wait_for(what, done, CONVERGE_TIMEOUT, step=2.0)


def settle(daemon: DaemonProcess) -> None:
    """Wait until the daemon runs no cycle (triggers the test sent may still be queued)."""
    wait_for("the daemon to be idle", daemon.idle, CONVERGE_TIMEOUT)
    time.sleep(1)
    wait_for("the daemon to be idle", daemon.idle, CONVERGE_TIMEOUT)


def live_plan(rig: Rig, *flags: str) -> str:
    """``proxyfleet -v plan`` against the lab hosts, as an operator runs it from a clone."""
    command = [sys.executable, "-m", "reconciler", "-v", "plan", "--repo", str(rig.remote.work)]
    access = ["--ssh-key", rig.lab["sshKey"], "--known-hosts", rig.lab["knownHosts"]]
    proc = subprocess.run(
        [*command, *access, "--age-identity", str(rig.identity), *flags],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 2, proc.stderr[-3000:]  # changes: the replace
    return proc.stdout + proc.stderr


def canary_search_space(rig: Rig, plans: list[str]) -> dict[str, str]:
    """Everything the run showed or wrote, by where it came from."""
    bare, workdir = rig.remote.bare, rig.daemon.workdir
    found = {f"plan {i}": text for i, text in enumerate(plans)}
    for log in sorted(workdir.glob("daemon-*.log")):
        found[log.name] = log.read_text(errors="replace")
    for name in ("status.yaml", "STATUS.md"):
        found[name] = git(bare, "show", f"{STATUS_BRANCH}:.proxyfleet/{name}")
    found["status commits"] = git(bare, "log", "--format=%B", STATUS_BRANCH)
    found["/metrics"] = rig.daemon.get("/metrics")[1]
    state = workdir / "state"
    for path in sorted(state.rglob("*")):
        # the image cache holds the guest image; the checkouts hold the repo (ciphertext)
        if path.is_file() and "images" not in path.relative_to(state).parts:
            found[str(path.relative_to(workdir))] = path.read_bytes().decode(errors="replace")
    return found


# -- fixtures -----------------------------------------------------------------------------


@dataclass
class Rig:
    lab: dict[str, Any]
    remote: Remote
    daemon: DaemonProcess
    host: LabHost
    """The Debian 13 host, whose zone the proxy is placed in."""
    hosts: list[LabHost]
    identity: Path
    """The daemon's age identity (``secrets.ageIdentityFile``)."""
    recipient: str

    def leaks(self) -> list[str]:
        return [f"{h.name}: {leak}" for h in self.hosts for leak in h.world().leaks()]


@pytest.fixture(scope="module")
def rig(lab: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rig]:
    tmp = tmp_path_factory.mktemp("daemon-e2e")
    bare, work = tmp / "fleet.git", tmp / "operator"
    git(tmp, "init", "-q", "--bare", "-b", "main", str(bare))
    git(tmp, "clone", "-q", str(bare), str(work))
    git(work, "checkout", "-q", "-b", "main")
    remote = Remote(bare, work)
    remote.push("An empty fleet on the lab hosts", {"fleet.yaml": fleet_yaml()})

    (tmp / "hook-secret").write_bytes(SECRET + b"\n")
    identity = tmp / "age-identity.txt"
    recipient = make_identity(identity)
    port = free_port()
    config = tmp / "proxyfleet.yaml"
    config.write_text(
        f"repo:\n  url: file://{bare}\n  branch: main\n"
        "interval: 3600\n"
        f'listen: "127.0.0.1:{port}"\n'
        f"webhook:\n  secretFile: {tmp / 'hook-secret'}\n"
        f"secrets:\n  ageIdentityFile: {identity}\n"
        f"ssh:\n  keyFile: {lab['sshKey']}\n  knownHostsFile: {lab['knownHosts']}\n"
        "log:\n  level: debug\n"  # every rpc traced: more lines for the canary search
        f"stateDir: {tmp / 'state'}\n"
        # The replace's new VM gets as long as the test waits for it (the default 600 s
        # is short for a boot while the other lab stream boots guests beside it).
        f"replaceTimeoutSeconds: {CONVERGE_TIMEOUT:.0f}\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("NOTIFY_SOCKET", "WATCHDOG_USEC")}
    daemon = DaemonProcess(config, port, tmp, env)
    hosts = [
        LabHost(
            h["name"], h["address"], h["zone"], h["guestSubnet"], lab["sshKey"], lab["knownHosts"]
        )
        for h in lab["hosts"]
    ]
    debian13 = next(h["name"] for h in lab["hosts"] if h["kind"] == "debian13")
    host = next(h for h in hosts if h.name == debian13)
    assert sum(h.zone == host.zone for h in hosts) == 1, "the proxy's zone must be its host's"
    for h in hosts:
        versions = h.sh("virsh -c qemu:///system version").strip().replace("\n", "; ")
        print(f"{h.name}: {versions}")
    assert "libvirt 11." in host.sh("virsh -c qemu:///system version")
    yield Rig(lab, remote, daemon, host, hosts, identity, recipient)
    daemon.stop_now()
    for n in range(1, daemon.starts + 1):
        print(f"--- daemon run {n} log tail:\n{(tmp / f'daemon-{n}.log').read_text()[-3000:]}")


# -- the test -----------------------------------------------------------------------------


def test_commits_drive_create_replace_and_delete_and_a_killed_create_converges(rig: Rig) -> None:
    daemon, remote, host, lab = rig.daemon, rig.remote, rig.host, rig.lab
    probe = lab["probeUrl"]
    timings: dict[str, float] = {}
    started = time.monotonic()

    # 1. An empty fleet: a first cycle, a first status commit, healthy.
    daemon.start()
    timings["first cycle"] = wait_for("the first cycle", lambda: daemon.cycles() >= 1, 120)
    assert remote.status_commits() == 1, daemon.log()
    assert daemon.get("/healthz")[0] == 200
    assert rig.leaks() == [] and host.world().ours() == []

    # 2. A commit adds the proxy, a signed webhook follows; SIGKILL once the create has made
    #    the VM's first volume on the host.
    revision = remote.push(
        f"Add {PROXY}", {f"proxies/{PROXY}.yaml": proxy_yaml(host.zone, probe, 1)}
    )
    assert daemon.hook() == 202
    pool = host.pool_on_disk()

    def overlay_made() -> bool:
        return any(p.name.startswith(PREFIX) for p in pool.iterdir())

    # The first create also downloads the image and uploads it to the host's pool.
    timings["commit -> first volume"] = wait_for(
        "the create's first volume", overlay_made, 600, step=0.01
    )
    daemon.signal(signal.SIGKILL)
    assert daemon.proc is not None and daemon.proc.wait(timeout=30) == -signal.SIGKILL
    log = daemon.log()
    assert "Reconcile started" in log and log.count("Reconcile finished") == 1, log[-3000:]
    at_kill = host.world()
    print(f"at SIGKILL: domains {at_kill.ours()}, volumes {at_kill.volumes}")

    daemon.start()

    def one_healthy_vm() -> bool:
        return daemon.health_of(PROXY).get("healthy") == 1.0

    timings["restart -> healthy"] = converge(
        daemon, f"{PROXY} healthy after the restart", one_healthy_vm
    )
    world = host.world()
    ours = world.ours()
    assert len(ours) == 1, world
    first = ours[0]
    assert world.domains[first] == ("running", True), world
    assert rig.leaks() == [], rig.leaks()
    assert sum(1 for h in rig.hosts for d in h.world().domains if d.startswith(PREFIX)) == 1
    statuses = remote.status()
    proxy = next(p for p in statuses["proxies"] if p["name"] == PROXY)
    assert (proxy["host"], proxy["domain"], proxy["state"], proxy["health"]) == (
        host.name,
        first,
        "running",
        "healthy",
    ), proxy
    assert statuses["observedRevision"] == revision
    assert remote.status_commits() >= 2
    message = git(remote.bare, "log", "-1", "--format=%B", STATUS_BRANCH)
    assert PROXY in message, message
    status, via_header = probe_through(proxy["ip"], probe)
    assert status == 204 and via(1) in via_header, (proxy, via_header)
    assert proxy["ip"].startswith(host.subnet.rsplit(".", 1)[0] + "."), proxy
    _, metrics = daemon.get("/metrics")
    assert f'proxyfleet_source_revision_info{{revision="{revision}"}} 1.0' in metrics
    assert f'proxyfleet_proxies{{state="running",zone="{host.zone}"}} 1.0' in metrics

    # An idle cycle over real hosts (new probe latencies, same state) adds no status commit.
    settle(daemon)
    commits, cycles = remote.status_commits(), daemon.cycles()
    daemon.signal(signal.SIGHUP)
    wait_for("the SIGHUP cycle", lambda: daemon.cycles() > cycles and daemon.idle(), 120)
    assert remote.status_commits() == commits, git(remote.bare, "log", "-3", STATUS_BRANCH)

    # 3. A userData change whose replacement create gets SIGKILL once it made its first
    #    volume, and a second change committed before the restart: the killed create's
    #    volumes are cleaned up (no domain will ever own them), the proxy is replaced by the
    #    newer VM, and the old one goes only after the new one passed its health check.
    t0 = time.monotonic()
    remote.push(
        f"{PROXY}: generation 2", {f"proxies/{PROXY}.yaml": proxy_yaml(host.zone, probe, 2)}
    )
    assert daemon.hook() == 202

    def replacement_volume() -> bool:
        return any(
            p.name.startswith(PREFIX) and not p.name.startswith(first) for p in pool.iterdir()
        )

    wait_for("the replacement's first volume", replacement_volume, 120, step=0.01)
    daemon.signal(signal.SIGKILL)
    assert daemon.proc is not None and daemon.proc.wait(timeout=30) == -signal.SIGKILL
    killed = host.world()
    orphans = [v for v in killed.volumes if v.startswith(PREFIX) and not v.startswith(first)]
    print(f"replacement killed: domains {killed.ours()}, its volumes {orphans}")
    assert orphans, killed
    write_secret(remote.work, "squid-tag", CANARY + "\n", rig.recipient)
    remote.push(
        f"{PROXY}: generation 3, its name with a secret",
        {f"proxies/{PROXY}.yaml": proxy_yaml(host.zone, probe, 3, secret="squid-tag")},
        added=["secrets/squid-tag.age"],
    )
    # What an operator would look at before the daemon acts: the plan, text and JSON.
    plans = [live_plan(rig, "--json"), live_plan(rig)]
    shown, _ = json.JSONDecoder().raw_decode(plans[0])  # stdout's JSON, then the -v log
    new = [a for a in shown["actions"] if a["action"] in ("create", "replace")]
    assert new and all(a["secrets"] == {"squid-tag": "(sensitive)"} for a in new), new
    assert "secrets: squid-tag (sensitive)" in plans[1], plans[1]
    daemon.start()
    both: list[World] = []

    def new_vm_defined() -> bool:
        world = host.world()
        if len(world.ours()) > 1:
            both.append(world)
            return True
        return False

    wait_for("the replacement VM", new_vm_defined, 120, step=1.0)
    assert both[0].domains[first] == ("running", True), both[0]
    assert probe_through(proxy["ip"], probe)[0] == 204, "the old VM serves while the new boots"

    def replaced() -> bool:
        ours = host.world().ours()
        return len(ours) == 1 and ours[0] != first and one_healthy_vm()

    converge(daemon, "the replace", replaced)
    timings["replace"] = time.monotonic() - t0
    second = host.world().ours()[0]
    log = daemon.log()
    # Within the replace, or (when the new VM needed longer than replaceTimeout) in the
    # next cycle's second step, which waits for the same health check.
    healthy = re.search(rf"VM {second}( on \S+)? is healthy at", log)
    assert healthy is not None, log[-4000:]
    assert healthy.start() < log.find(f"deleted domain {first}"), log[-4000:]
    assert rig.leaks() == [], rig.leaks()
    left = host.world()
    assert not [v for v in orphans if v in left.volumes], (orphans, left)
    assert len(left.ours()) == 1, left
    if not killed.ours()[1:]:  # killed before its define: only the cleanup removes them
        assert "deleted unused volume" in log, log[-4000:]
    proxy = next(p for p in remote.status()["proxies"] if p["name"] == PROXY)
    assert (proxy["domain"], proxy["health"]) == (second, "healthy"), proxy
    status, via_header = probe_through(proxy["ip"], probe)
    assert status == 204 and f"{via(3)}-{CANARY}" in via_header, (proxy, via_header)
    # The value reached the guest through its seed, the one place it is written ...
    assert CANARY.encode() in (pool / f"{second}-seed.iso").read_bytes()
    # ... and nothing the daemon or the operator's tools said or wrote shows it.
    seen = canary_search_space(rig, plans)
    sizes = {where: len(text) for where, text in seen.items()}
    assert sum(sizes.values()) > 10_000, sizes
    assert f"domain={second}" in seen["daemon-3.log"], sizes  # the DEBUG log of its create
    leaks = [where for where, text in seen.items() if CANARY in text]
    assert leaks == [], f"the secret's value leaked into {leaks}"
    print(f"canary searched in {len(seen)} outputs, {sum(sizes.values())} characters")

    # 4. The manifest removed: the VM goes with its overlay, seed and NVRAM. Removing the
    #    only proxy is a 100 % shrink: the commit acknowledges it (policy.maxShrinkPercent).
    t0 = time.monotonic()
    acknowledged = fleet_yaml() + "    acknowledgeShrinkTo: 0\n"
    remote.push(f"Remove {PROXY}", {f"proxies/{PROXY}.yaml": None, "fleet.yaml": acknowledged})
    assert daemon.hook() == 202
    converge(daemon, "the delete", lambda: host.world().ours() == [])
    timings["delete"] = time.monotonic() - t0
    world = host.world()
    assert not any(second in name for name in [*world.volumes, *world.nvram]), world
    assert rig.leaks() == [], rig.leaks()
    wait_for(
        "the status to say the proxy is gone",
        lambda: all(p["name"] != PROXY for p in remote.status()["proxies"]),
        60,
    )
    assert daemon.health_of(PROXY) == {}

    # 5. SIGTERM: exit 0, no bridge socket left behind.
    daemon.signal(signal.SIGTERM)
    assert daemon.proc is not None and daemon.proc.wait(timeout=60) == 0, daemon.log()[-3000:]
    assert list(daemon.runtime_dir.iterdir()) == []
    timings["total"] = time.monotonic() - started
    print("timings: " + ", ".join(f"{k} {v:.0f}s" for k, v in timings.items()))
