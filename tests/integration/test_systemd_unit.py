"""deploy/systemd/proxyfleet.service under a real systemd, as docs/operations.md installs it.

The machine's PID 1 is not systemd, so a Debian 12 root (``lab/systemdroot.py``, built once
and cached like the lab's other roots) is booted with systemd as PID 1 in namespaces of its
own (``lab/systemdbox.py``), sharing the machine's network: the daemon inside reaches the
real libvirtd through the real sshd of the integration fixtures on 127.0.0.1, fetches the
fleet repo over ssh from the same sshd and pushes its status branch back, and the test
fetches /metrics from outside. The unit file is copied unchanged; the only drop-in is the
one docs/operations.md asks for when ``listen`` is not port 9477 (SocketBindAllow).

Nothing is timed here but by the unit's own settings: ``systemctl start`` returns once
READY=1 came (Type=notify), ``systemctl stop`` ends in Result=success only if the daemon
exited 0 before TimeoutStopSec, and WatchdogSec (120 s, as shipped) decides when a hung
daemon is killed.
"""

from __future__ import annotations

import contextlib
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from gitutil import Remote, make_remote
from hostservices import Sshd, SshKeys, free_port

from benchmarks import load_worst
from lab import config, systemdroot
from lab.systemdbox import SystemdBox
from reconciler.model import Host

ROOT = Path(__file__).resolve().parents[2]
UNIT = ROOT / "deploy" / "systemd" / "proxyfleet.service"
SHIPPED_PORT = 9477
WAIT = 300.0
"""Seconds any wait for the daemon gives up after (a failure, never a measured bound)."""

FLEET = """\
apiVersion: proxyfleet/v1
kind: Fleet
metadata:
  name: sd
spec:
  images:
    debian-12:
      url: https://images.example.test/debian-12.qcow2
      sha256: abababababababababababababababababababababababababababababababab
  machineTypes:
    small: {{vcpus: 1, memoryMiB: 512, diskGiB: 4}}
  hosts:
    - name: {name}
      address: 127.0.0.1
      port: {port}
      zone: {zone}
      pool: {pool}
      network: {{network: {network}}}
      domainType: qemu
      cpuMode: none
  policy:
    allowEmpty: true
"""


@dataclass
class Installed:
    """The booted box with proxyfleet installed and the unit in place."""

    box: SystemdBox
    port: int
    remote: Remote
    repo_url: str

    def configure(self, text: str) -> None:
        """/etc/proxyfleet/proxyfleet.yaml, readable by the daemon's group only."""
        mode = ("-m", "0640", "-o", "root", "-g", "proxyfleet")
        self.box.run("install", *mode, "/dev/stdin", "/etc/proxyfleet/proxyfleet.yaml", stdin=text)

    def systemctl(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return self.box.run("systemctl", *args, check=check, timeout=WAIT)

    def show(self, *names: str) -> dict[str, str]:
        out = self.systemctl("show", "proxyfleet", *(f"--property={n}" for n in names)).stdout
        return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)

    def journal(self, *args: str) -> str:
        return self.box.run("journalctl", "--no-pager", "-o", "cat", *args).stdout

    def log(self) -> str:
        """This boot's journal of the unit: systemd's lines and the daemon's."""
        return self.journal("-u", "proxyfleet")

    def wait(self, what: str, check: Callable[[], bool]) -> None:
        deadline = time.monotonic() + WAIT
        while not check():
            if time.monotonic() > deadline:
                raise AssertionError(f"no {what} within {WAIT:.0f} s:\n{self.log()[-6000:]}")
            time.sleep(1)

    def metrics(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=10) as r:
            return str(r.read().decode())


@contextlib.contextmanager
def timed(label: str, seconds: list[tuple[str, float]]) -> Iterator[None]:
    started = time.monotonic()
    yield
    seconds.append((label, time.monotonic() - started))


def say(request: pytest.FixtureRequest, text: str) -> None:
    """A line on the terminal even when pytest captures output: the figures of the run."""
    reporter = request.config.pluginmanager.getplugin("terminalreporter")
    capture = request.config.pluginmanager.getplugin("capturemanager")
    if reporter is not None and capture is not None:
        with capture.global_and_fixture_disabled():
            reporter.ensure_newline()
            reporter.write_line(f"[systemd unit] {text}")


@pytest.fixture(scope="module")
def installed(
    tmp_path_factory: pytest.TempPathFactory,
    sshd: Sshd,
    ssh_keys: SshKeys,
    host: Host,
    request: pytest.FixtureRequest,
) -> Iterator[Installed]:
    """Steps 2-6 of docs/operations.md "Install on a management box" in a booted box."""
    started = time.monotonic()
    built = systemdroot.build(config.IMAGES_DIR)
    root_seconds = time.monotonic() - started
    work = tmp_path_factory.mktemp("systemd-unit")
    share = work / "share"
    share.mkdir()
    wheel = build_wheel(work)
    shutil.copy(wheel, share)
    for name, source in (
        ("id_ed25519", ssh_keys.client_key),
        ("known_hosts", ssh_keys.known_hosts),
        ("proxyfleet.service", UNIT),
    ):
        shutil.copy(source, share / name)
    share.chmod(0o755)
    for item in share.iterdir():
        item.chmod(0o644)

    remote = make_remote(work)
    remote.commit(
        {
            "fleet.yaml": FLEET.format(
                name=host.name,
                port=sshd.port,
                zone=host.zone,
                pool=host.pool,
                network=host.network.name,
            )
        },
        "Fleet with one real host",
    )
    box = SystemdBox(built.path, work / "box", binds=(share,))
    try:
        booted = box.start()
        install(box, share, wheel.name)
        port = free_port()
        drop_in(box, port)
        installed = Installed(box, port, remote, f"ssh://root@127.0.0.1:{sshd.port}{remote.bare}")
        say(
            request,
            f"root {'built' if built.built else 'cached'} in {root_seconds:.0f} s "
            f"({built.versions}); boot {booted:.1f} s; "
            f"install {time.monotonic() - started - root_seconds - booted:.0f} s",
        )
        yield installed
    finally:
        box.stop()
        say(request, f"module wall time {time.monotonic() - started:.0f} s")


def build_wheel(work: Path) -> Path:
    """proxyfleet's wheel from this checkout (docs: "or proxyfleet-<version>.whl")."""
    source = work / "src"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    shutil.copytree(
        ROOT / "reconciler", source / "reconciler", ignore=shutil.ignore_patterns("__pycache__")
    )
    wheels = work / "wheel"
    argv = ("-m", "pip", "wheel", "-q", "--no-deps", "--wheel-dir", str(wheels), str(source))
    subprocess.run([sys.executable, *argv], check=True, capture_output=True)
    return next(wheels.glob("proxyfleet-*.whl"))


def install(box: SystemdBox, share: Path, wheel: str) -> None:
    system_user = ("--system", "--home-dir", "/var/lib/proxyfleet", "--shell", "/usr/sbin/nologin")
    box.run("useradd", *system_user, "proxyfleet")
    pip = ("/opt/proxyfleet/bin/pip", "install", "-q", "--no-index", "--no-deps")
    box.run(*pip, f"{share}/{wheel}")
    box.run("/opt/proxyfleet/bin/proxyfleet", "--version")
    script = f"""
set -e
install -d -m 0750 -o root -g proxyfleet /etc/proxyfleet /etc/proxyfleet/ssh /etc/proxyfleet/git
for dir in ssh git; do
    install -m 0600 -o proxyfleet -g proxyfleet {share}/id_ed25519 /etc/proxyfleet/$dir/id_ed25519
    install -m 0644 -o proxyfleet -g proxyfleet {share}/known_hosts /etc/proxyfleet/$dir/known_hosts
done
cp {share}/proxyfleet.service /etc/systemd/system/
systemd-analyze verify /etc/systemd/system/proxyfleet.service
"""
    box.run("sh", "-c", script)


def drop_in(box: SystemdBox, port: int) -> None:
    """The listener's port as docs/operations.md says to change it: a drop-in."""
    text = f"[Service]\nSocketBindAllow=\nSocketBindAllow=tcp:{port}\n"
    box.run("mkdir", "-p", "/etc/systemd/system/proxyfleet.service.d")
    box.run("sh", "-c", "cat > /etc/systemd/system/proxyfleet.service.d/listen.conf", stdin=text)
    box.run("systemctl", "daemon-reload")


def daemon_config(installed: Installed, *, repo_url: str, repo: str = "", extra: str = "") -> str:
    """The config of docs/operations.md step 5 (no webhook, no secrets) with ``repo`` lines
    added to ``repo:`` and ``extra`` lines at the top level."""
    return f"""\
repo:
  url: {repo_url}
  sshKeyFile: /etc/proxyfleet/git/id_ed25519
  knownHostsFile: /etc/proxyfleet/git/known_hosts
{repo}ssh:
  keyFile: /etc/proxyfleet/ssh/id_ed25519
  knownHostsFile: /etc/proxyfleet/ssh/known_hosts
listen: "127.0.0.1:{installed.port}"
{extra}"""


def test_the_shipped_unit_starts_ready_reaches_its_host_reloads_into_a_cycle_and_stops_cleanly(
    installed: Installed, host: Host, request: pytest.FixtureRequest
) -> None:
    seconds: list[tuple[str, float]] = []
    installed.configure(daemon_config(installed, repo_url=installed.repo_url))
    with timed("start (READY=1)", seconds):
        installed.systemctl("enable", "--now", "proxyfleet")
    shown = installed.show("ActiveState", "SubState", "Type", "StatusText", "MainPID")
    assert (shown["ActiveState"], shown["SubState"], shown["Type"]) == (
        "active",
        "running",
        "notify",
    ), shown
    assert "Started proxyfleet.service" in installed.journal("-u", "proxyfleet"), installed.log()
    assert shown["StatusText"], "the daemon's STATUS= never reached systemd"

    with timed("first cycle", seconds):
        installed.wait("first reconcile", lambda: "Reconcile finished" in installed.log())
    metrics = installed.metrics()
    assert f'proxyfleet_host_up{{host="{host.name}",zone="{host.zone}"}} 1.0' in metrics, metrics
    assert installed.remote.branch_log("proxyfleet-status"), "no status pushed over ssh"
    state = installed.box.run(
        "find", "/var/lib/proxyfleet", "-maxdepth", "2", "-printf", "%u %p\n"
    ).stdout
    assert "proxyfleet /var/lib/proxyfleet/repo/.git" in state, state

    assert_sandboxed(installed, int(shown["MainPID"]))
    forwards = forward_children(installed, int(shown["MainPID"]))
    assert len(forwards) == 1, f"libvirt not carried by one ssh child (the default): {forwards}"
    assert f":{host.socket} " in forwards[0], forwards

    with timed("reload -> cycle", seconds):
        installed.systemctl("reload", "proxyfleet")
        installed.wait(
            "reconcile after reload", lambda: "Reconcile started (SIGHUP)" in installed.log()
        )
        installed.wait("second reconcile", lambda: installed.log().count("Reconcile finished") >= 2)
    runs = re.findall(
        r"^proxyfleet_reconcile_runs_total\{[^}]*\} (\S+)$", installed.metrics(), re.M
    )
    assert sum(float(n) for n in runs) == 2.0, runs

    with timed("stop", seconds):
        installed.systemctl("stop", "proxyfleet")
    stopped = installed.show("ActiveState", "Result", "ExecMainCode", "ExecMainStatus")
    assert stopped == {
        "ActiveState": "inactive",
        "Result": "success",
        "ExecMainCode": "1",
        "ExecMainStatus": "0",
    }, stopped
    assert "Stopped." in installed.journal("-u", "proxyfleet", "-n", "5")
    say(request, "; ".join(f"{label} {value:.1f} s" for label, value in seconds))


def forward_children(installed: Installed, pid: int) -> list[str]:
    """Command lines of the daemon's ``ssh -N -L`` children (``ssh.libvirtTransport:
    openssh``, the default), found through every thread's children: one long-lived
    thread of the daemon forks them."""
    listed = installed.box.run(
        "sh",
        "-c",
        f"for c in $(cat /proc/{pid}/task/*/children); do "
        "tr '\\0' ' ' < /proc/$c/cmdline; echo; done",
    ).stdout
    return [line for line in listed.splitlines() if " -N " in line and " -L " in line]


def assert_sandboxed(installed: Installed, pid: int) -> None:
    """The directives of the unit, seen from the kernel's side of the running daemon."""
    box = installed.box
    status = box.run("cat", f"/proc/{pid}/status").stdout
    fields = dict(re.findall(r"^(\w+):\s*(.*)$", status, flags=re.M))
    assert fields["NoNewPrivs"] == "1" and fields["Seccomp"] == "2", fields
    assert fields["CapEff"] == fields["CapBnd"] == "0000000000000000", fields
    uid = box.run("id", "-u", "proxyfleet").stdout.strip()
    assert fields["Uid"].split()[0] == uid, fields
    uid_map = box.run("cat", f"/proc/{pid}/uid_map").stdout.split()
    assert len(uid_map) == 6, f"PrivateUsers: {uid_map}"  # root and proxyfleet, nobody else
    mounts = box.run("cat", f"/proc/{pid}/mountinfo").stdout.splitlines()
    by_point = {line.split()[4]: line for line in mounts}
    assert by_point["/"].split()[5].split(",")[0] == "ro", by_point["/"]  # ProtectSystem
    assert by_point["/var/lib/proxyfleet"].split()[5].split(",")[0] == "rw"  # ReadWritePaths
    assert "hidepid=invisible" in by_point["/proc"] and "subset=pid" in by_point["/proc"]
    assert "/tmp" in by_point and "/home" in by_point  # PrivateTmp, ProtectHome
    limits = box.run("cat", f"/proc/{pid}/limits").stdout
    assert re.search(r"Max open files\s+1024\s+1024", limits), limits
    cgroup = "/sys/fs/cgroup/{}/system.slice/proxyfleet.service/{}"
    for controller, knob, value in (
        ("memory", "memory.limit_in_bytes", str(1 << 30)),
        ("pids", "pids.max", "256"),
    ):
        path = cgroup.format(controller, knob)
        if box.run(
            "test", "-e", f"/sys/fs/cgroup/{controller}/system.slice", check=False
        ).returncode:
            path = f"/sys/fs/cgroup/system.slice/proxyfleet.service/{knob.split('.', 1)[0]}.max"
        assert box.run("cat", path).stdout.strip() == value, path
    devices = box.run("cat", cgroup.format("devices", "devices.list"), check=False).stdout
    assert "a *:* rwm" not in devices, devices  # DevicePolicy=closed
    warnings = installed.journal("-b", "_PID=1", "-p", "warning")
    assert "proxyfleet" not in warnings, warnings


class Silent:
    """A TCP server that accepts every connection and never says a word (a hung git server)."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.held: list[socket.socket] = []
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        with contextlib.suppress(OSError):
            while True:
                conn, _ = self.sock.accept()
                self.held.append(conn)

    def close(self) -> None:
        """Stop listening (shutdown wakes the blocked accept) and hang up on everyone."""
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()
        self._thread.join(timeout=10)
        for conn in self.held:
            conn.close()


def test_the_watchdog_restarts_the_daemon_when_a_cycle_hangs_on_a_silent_git_server(
    installed: Installed, request: pytest.FixtureRequest
) -> None:
    seconds: list[tuple[str, float]] = []
    silent = Silent()
    try:
        # interval 3 s: three intervals stay below hungAfterSeconds, the one that counts.
        installed.configure(
            daemon_config(
                installed,
                repo_url=f"ssh://root@127.0.0.1:{silent.port}/fleet.git",
                repo="  fetchTimeoutSeconds: 3600\n",
                extra="interval: 3\nhungAfterSeconds: 10\n",
            )
        )
        installed.systemctl("start", "proxyfleet")
        first = installed.show("MainPID", "NRestarts")
        with timed("hung cycle -> watchdog restart", seconds):
            installed.wait(
                "watchdog restart",
                lambda: installed.show("NRestarts")["NRestarts"] != first["NRestarts"],
            )
        log = installed.log()
        assert "A reconcile cycle looks hung; no longer pinging the watchdog." in log, log
        assert "Watchdog timeout" in log and "Failed with result 'watchdog'" in log, log
        installed.wait(
            "READY after the restart",
            lambda: installed.show("ActiveState")["ActiveState"] == "active",
        )
        assert installed.show("MainPID")["MainPID"] != first["MainPID"]
    finally:
        silent.close()  # the fetch fails at once: the restarted daemon's cycle ends
    with timed("stop", seconds):
        installed.systemctl("stop", "proxyfleet")
    assert installed.show("Result")["Result"] == "success"
    say(request, "; ".join(f"{label} {value:.1f} s" for label, value in seconds))


def test_the_worst_repo_the_limits_allow_stalls_the_daemon_under_the_units_memory_max(
    installed: Installed, host: Host, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """benchmarks/load_worst.py's "all at once" repo (every load bound nearly reached),
    pushed to the daemon's remote: one cycle refuses it, the unit is not restarted, and
    the cgroup's peak memory is printed (docs/security.md, "Worst load")."""
    fleet = FLEET.format(
        name=host.name, port=0, zone=host.zone, pool=host.pool, network=host.network.name
    )
    (tmp_path / "fleet.yaml").write_text(fleet)
    load_worst.all_at_once(tmp_path)
    files = {p.name: p.read_text() for p in tmp_path.iterdir()}
    installed.remote.commit(files, "The worst repo the load's limits allow")
    installed.configure(daemon_config(installed, repo_url=installed.repo_url))
    before = installed.log().count("Reconcile finished")
    started = time.monotonic()
    installed.systemctl("start", "proxyfleet")
    # A start by hand resets the counter (an earlier test's watchdog restart included).
    restarts = installed.show("NRestarts")["NRestarts"]
    installed.wait("the cycle", lambda: installed.log().count("Reconcile finished") > before)
    cycle = time.monotonic() - started
    assert installed.show("ActiveState", "NRestarts") == {
        "ActiveState": "active",
        "NRestarts": restarts,
    }
    assert 'proxyfleet_reconcile_runs_total{result="stalled"} 1.0' in installed.metrics()
    peak = memory_peak(installed)
    installed.systemctl("stop", "proxyfleet")
    say(request, f"worst repo: start to first cycle {cycle:.1f} s; cgroup peak {peak >> 20} MiB")


def memory_peak(installed: Installed) -> int:
    """Bytes: the unit's cgroup's peak memory (v2 ``memory.peak``, v1 max_usage)."""
    for path in (
        "/sys/fs/cgroup/system.slice/proxyfleet.service/memory.peak",
        "/sys/fs/cgroup/memory/system.slice/proxyfleet.service/memory.max_usage_in_bytes",
    ):
        found = installed.box.run("cat", path, check=False)
        if found.returncode == 0:
            return int(found.stdout.strip())
    raise AssertionError("the unit's cgroup shows no peak memory")
