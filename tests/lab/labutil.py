"""Helpers for the lab tests (a module of its own: conftest modules are not importable).

Host names and addresses always come from lab.json or ``lab.config``: the lab may run as
another instance (PROXYFLEET_LAB_INSTANCE), whose hosts are pfhost11.., pfhost21.., ...
What a host holds is read from inside its namespaces (nsenter) or from its state directory
on disk, never over its sshd, so that it can be read while a test has stopped that sshd.
"""

from __future__ import annotations

import contextlib
import json
import os
import pty
import re
import select
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from lab import config as lab_config
from lab import hosts as lab_hosts
from lab.sampling import Periodic

ROOT = Path(__file__).resolve().parents[2]
VIRSH = ("virsh", "-q", "-c", "qemu:///system")
POOL_DIR = "/var/lib/libvirt/images"
NVRAM_DIR = "/var/lib/libvirt/qemu/nvram"


def lab_cli(*args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    """Run ``python -m lab ARGS`` from the repo root; fail the test with its output if it fails."""
    proc = subprocess.run(
        [sys.executable, "-m", "lab", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if proc.returncode not in (0, 3):
        pytest.fail(
            f"python -m lab {' '.join(args)} exited {proc.returncode}:\n"
            f"{proc.stdout}\n{proc.stderr}"
        )
    return proc


def layout(name: str) -> lab_config.HostLayout:
    """The lab layout of host ``name`` (which must belong to this lab instance)."""
    found = lab_config.HostLayout.from_name(name)
    assert found is not None, f"{name} is not a host of lab instance {lab_config.INSTANCE}"
    return found


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-c", "user.name=lab", "-c", "user.email=lab@localhost", *args],
        cwd=repo,
        check=True,
        capture_output=True,
        text=True,
    ).stdout


# --- what guests run ---------------------------------------------------------------------


SERIAL_GETTY = "  - [systemctl, start, --no-block, serial-getty@ttyS0.service]\n"
"""A runcmd line for a guest whose serial console a test logs in to. On a slow boot (TCG on a
loaded machine) udev announces /dev/ttyS0 more than systemd's 90 s device timeout after
systemd starts waiting for it: "Timed out waiting for device dev-ttyS0.device", "Dependency
failed for serial-getty@ttyS0.service", and nothing starts the getty later, so the console
stays silent for good. By runcmd the device is there (or its new job waits for it)."""


def squid_user_data(name: str, *, tag: str = "v1", serial_getty: bool = False) -> str:
    """A cloud-config shaped like examples/fleet-repo's: it installs, configures, enables and
    starts squid itself (the lab image ships squid off). ``packages`` cannot reach a mirror in
    the lab and fails; cloud-init still runs runcmd. ``visible_hostname``, and so every
    response's Via header, reads ``NAME-TAG-was-ACTIVE-ENABLED``: which user-data the serving
    squid runs, and squid's state just before runcmd started it (the image ships it
    ``inactive`` and ``disabled``, see ``SQUID_BEFORE``). ``serial_getty`` adds
    ``SERIAL_GETTY``."""
    return (
        "#cloud-config\n"
        "package_update: true\n"
        "packages:\n"
        "  - squid\n"
        "write_files:\n"
        "  - path: /etc/squid/squid.conf\n"
        "    defer: true\n"
        "    content: |\n"
        "      http_port 3128\n"
        f"      visible_hostname {name}-{tag}\n"
        "      acl lan src 10.0.0.0/8\n"
        "      http_access allow localhost\n"
        "      http_access allow lan\n"
        "      http_access deny all\n"
        "      cache deny all\n"
        "      access_log stdio:/var/log/squid/access.log squid\n"
        "      coredump_dir /var/spool/squid\n"
        "runcmd:\n"
        "  - 'sed -i \"s/^visible_hostname .*/&-was-$(systemctl is-active squid)-"
        "$(systemctl is-enabled squid)/\" /etc/squid/squid.conf'\n"
        "  - [systemctl, enable, squid]\n"
        "  - [systemctl, restart, squid]\n" + (SERIAL_GETTY if serial_getty else "")
    )


SQUID_BEFORE = "was-inactive-disabled"


@dataclass(frozen=True)
class Probe:
    status: int | None
    via: str = ""


def probe_through(ip: str, url: str) -> Probe:
    """GET ``url`` through the squid at ``ip``:3128: the status and squid's Via header."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({"http": f"http://{ip}:3128"}))
    try:
        with opener.open(url, timeout=10) as resp:
            return Probe(int(resp.status), resp.headers.get("Via", ""))
    except urllib.error.HTTPError as exc:
        return Probe(exc.code, exc.headers.get("Via", ""))
    except OSError:
        return Probe(None)


# --- what hosts hold -----------------------------------------------------------------------


def virsh(host: str, *args: str) -> str:
    """``virsh ARGS`` inside lab host ``host``'s namespaces (works with its sshd stopped)."""
    return lab_hosts.in_host(layout(host), *VIRSH, *args)


def domains(host: str) -> dict[str, tuple[str, str]]:
    """Every domain on ``host``: name -> (uuid, state)."""
    found = {}
    for name in virsh(host, "list", "--all", "--name").split():
        found[name] = (virsh(host, "domuuid", name).strip(), virsh(host, "domstate", name).strip())
    return found


def clear_domains(host: str) -> list[str]:
    """Destroy and undefine every domain on ``host``, with its NVRAM and its volumes (the
    overlay and seed ISO; never a base, which only backs them): what earlier modules of the
    session left running there. Returns the domains removed."""
    removed = []
    for name in virsh(host, "list", "--all", "--name").split():
        lab_hosts.in_host(layout(host), *VIRSH, "destroy", name, check=False)
        virsh(host, "undefine", "--nvram", "--remove-all-storage", name)
        removed.append(name)
    return removed


def running(host: str) -> set[str]:
    return set(virsh(host, "list", "--state-running", "--name").split())


def pool_files(host: str) -> set[str]:
    """The files in the host's storage pool directory, read from its state dir on disk."""
    return {p.name for p in (layout(host).state / "var-lib-libvirt" / "images").iterdir()}


def nvram_files(host: str) -> set[str]:
    nvram = layout(host).state / "var-lib-libvirt" / "qemu" / "nvram"
    return {p.name for p in nvram.iterdir()} if nvram.is_dir() else set()


def pool_file(host: str, name: str) -> Path:
    return layout(host).state / "var-lib-libvirt" / "images" / name


def daemon_pid(host: str, name: str) -> int | None:
    procs = [p for p in lab_hosts.processes_in_netns(layout(host).netns) if p.name == name]
    return procs[0].pid if procs else None


def lab_daemon(action: str, name: str, host: str) -> None:
    lab_cli("daemon", action, name, "--host", str(layout(host).n))


# --- proxyfleet apply ----------------------------------------------------------------------

MUTATING = re.compile(
    r"rpc=vir\w*(Create|Define|Destroy|Undefine|Delete|Upload|Set|Shutdown|Reboot|Resume|"
    r"Suspend|Build|Wipe|Resize|Attach|Detach)\w*"
)
LOG_LINE = re.compile(
    r"^time=(?P<time>\S+) level=\S+ logger=\S+ "
    r'msg=(?:"(?P<quoted>(?:[^"\\]|\\.)*)"|(?P<bare>\S*))(?: .*)?$'
)
"""A logfmt line: its message is quoted (or one bare word), and the line's fields (host=,
proxy=, revision=, run=) may follow it."""
_ESCAPED = re.compile(r"\\(.)")


def log_message(match: re.Match[str]) -> str:
    """The message of a ``LOG_LINE`` match, unquoted as logsetup quoted it."""
    if match["quoted"] is None:
        return match["bare"]
    return _ESCAPED.sub(lambda m: "\n" if m[1] == "n" else m[1], match["quoted"])


@dataclass(frozen=True)
class Applied:
    """One ``proxyfleet -v apply --yes --json``: its JSON result, exit code and log."""

    result: dict[str, Any]
    code: int
    log: str
    seconds: float

    def actions(self, kind: str) -> list[dict[str, Any]]:
        return [a for a in self.result["plan"]["actions"] if a["action"] == kind]

    def proxies(self) -> dict[str, dict[str, Any]]:
        return {p["name"]: p for p in self.result["proxies"]}

    def mutating_calls(self) -> list[str]:
        return [m.group(0) for m in MUTATING.finditer(self.log)]

    def events(self) -> list[tuple[float, str]]:
        """(epoch seconds, message) of every log line."""
        found = []
        for line in self.log.splitlines():
            m = LOG_LINE.match(line)
            if m:
                when = datetime.strptime(m["time"], "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)
                found.append((when.timestamp(), log_message(m)))
        return found

    def first(self, pattern: str) -> float:
        """Time of the first log line whose message matches ``pattern`` (fails if none)."""
        regex = re.compile(pattern)
        for when, msg in self.events():
            if regex.search(msg):
                return when
        raise AssertionError(f"no log line matches {pattern!r}:\n{self.log[-4000:]}")


def apply_command(lab: dict[str, Any], repo: Path, *flags: str) -> list[str]:
    """``proxyfleet -v apply`` of ``repo`` with a state dir of its own beside it.

    The state dir holds the delete window (``deletes.json``, maxDeletesPerRun per hour):
    one shared by every module let test_e2e_apply's and test_e2e_resources' deletes use up
    test_e2e_debian13's budget in a full run, which then deleted one of its two VMs."""
    return [
        sys.executable,
        "-m",
        "reconciler",
        "-v",
        "apply",
        "--yes",
        "--json",
        "--repo",
        str(repo),
        "--ssh-key",
        lab["sshKey"],
        "--known-hosts",
        lab["knownHosts"],
        "--state-dir",
        str(repo.parent / "proxyfleet-state"),
        *flags,
    ]


def finish_apply(
    proc: subprocess.Popen[str], started: float, log_file: Path, *, timeout: float = 1800
) -> Applied:
    out, _ = proc.communicate(timeout=timeout)
    seconds = time.monotonic() - started
    log = log_file.read_text()
    print(f"apply took {seconds:.0f}s, exit {proc.returncode}")
    assert out, f"apply printed no JSON (exit {proc.returncode}):\n{log[-4000:]}"
    return Applied(json.loads(out), proc.returncode, log, seconds)


def start_apply(
    lab: dict[str, Any], repo: Path, log_file: Path, *flags: str
) -> tuple[subprocess.Popen[str], float]:
    """``proxyfleet -v apply`` in the background, its log (DEBUG, with every rpc) to a file."""
    with open(log_file, "w") as log:
        proc = subprocess.Popen(
            apply_command(lab, repo, *flags), stdout=subprocess.PIPE, stderr=log, text=True
        )
    return proc, time.monotonic()


def apply(lab: dict[str, Any], repo: Path, log_file: Path, *flags: str) -> Applied:
    """``proxyfleet -v apply --yes --json`` with ``flags`` (e.g. ``--no-wait``: one run)."""
    proc, started = start_apply(lab, repo, log_file, *flags)
    return finish_apply(proc, started, log_file)


# --- proxyfleet console -------------------------------------------------------------------


@dataclass(frozen=True)
class ConsoleRun:
    """One ``proxyfleet console`` session driven as an operator's terminal would."""

    connected: float
    """Seconds from the command's start to its ``Connected to ...`` line."""
    prompt: float
    """Seconds from the command's start to the guest's ``NAME login:``."""
    code: int | None
    """The exit code after Ctrl-] (None: still running 60 s later, then killed)."""
    text: str
    """Everything the terminal showed."""
    second: subprocess.CompletedProcess[str]
    """A second ``console`` of the same proxy started while this one was attached."""


def console_command(lab: dict[str, Any], repo: Path, proxy: str) -> list[str]:
    return [
        *(sys.executable, "-m", "reconciler", "console", proxy, "--repo", str(repo)),
        *("--ssh-key", lab["sshKey"], "--known-hosts", lab["knownHosts"]),
    ]


def console_login(
    lab: dict[str, Any], repo: Path, proxy: str, *, timeout: float = 300
) -> ConsoleRun:
    """``proxyfleet console PROXY`` with stdin, stdout and stderr on a pty: Enter every 5 s
    from its ``Connected`` line until the guest's getty prints ``PROXY login:`` (fails the
    test after ``timeout`` s, the output so far in the message); then a second console of the
    same proxy, without --force, on no terminal; then Ctrl-]."""
    leader, follower = pty.openpty()
    started = time.monotonic()
    proc = subprocess.Popen(
        console_command(lab, repo, proxy),
        cwd=ROOT,
        stdin=follower,
        stdout=follower,
        stderr=follower,
    )
    os.close(follower)
    seen = bytearray()
    connected = 0.0
    prompt = re.compile(rb"\b" + re.escape(proxy.encode()) + rb" login: ")
    try:
        nudged = 0.0
        while not prompt.search(seen):
            assert proc.poll() is None, seen.decode(errors="replace")
            assert time.monotonic() - started < timeout, (
                f"no login prompt {timeout:.0f} s after the command started; the terminal "
                f"showed:\n{seen.decode(errors='replace')}"
            )
            if not connected and b"escape character is ^]" in seen:
                connected = time.monotonic() - started
            if connected and time.monotonic() - nudged > 5:
                os.write(leader, b"\r")
                nudged = time.monotonic()
            if select.select([leader], [], [], 0.2)[0]:
                seen += os.read(leader, 65536)
        at_prompt = time.monotonic() - started
        second = subprocess.run(
            console_command(lab, repo, proxy),
            cwd=ROOT,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        os.write(leader, b"\x1d")
        try:
            code: int | None = proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            code = None
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        with contextlib.suppress(OSError):  # EIO once the command closed its end
            while select.select([leader], [], [], 0.2)[0] and (chunk := os.read(leader, 65536)):
                seen += chunk
        os.close(leader)
    return ConsoleRun(connected, at_prompt, code, seen.decode(errors="replace"), second)


class Sampler(Periodic):
    """Samples the running domains of one host every ``interval`` seconds in a thread."""

    def __init__(self, host: str, *, interval: float = 1.0) -> None:
        super().__init__(interval)
        self.host = host
        self.samples: list[tuple[float, frozenset[str]]] = []

    def look(self) -> None:
        with contextlib.suppress(lab_hosts.LabError):  # a lost sample is no evidence
            seen = frozenset(running(self.host))
            # Stamped when the answer is in: the state it shows held at or before then.
            self.samples.append((time.time(), seen))
