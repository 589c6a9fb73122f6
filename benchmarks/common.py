"""What the benchmarks share: repeated timing, machine facts, the lab, fleet repos, RPC counts.

Every benchmark runs one warm-up and then ``runs`` measured repetitions and
reports the median with the min-max range. Results travel from a benchmark
process to ``benchmarks.run`` as JSON (``Result``), so that each row runs in a
process of its own (peak RSS stays per row; a crash costs one row).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from reconciler.model import Host, HostNetwork
from reconciler.model.settings import SshSettings

ROOT = Path(__file__).resolve().parent.parent
BENCH_VENV = ROOT / ".bench-venv"
"""kcli lives here, never in the project's venv."""

MUTATING_RPC = re.compile(
    r"vir\w*(Create|Define|Destroy|Undefine|Delete|Upload|Set|Shutdown|Reboot|Resume|"
    r"Suspend|Build|Wipe|Resize|Attach|Detach)\w*"
)
"""RPC names that change something on a host. ``virStoragePoolRefresh`` is not one:
it rescans the pool's directory so that the free space observe reports is current
(issue 18), and changes no domain, volume or file; benchmarks list it on its own."""


@dataclass
class Metric:
    """One measured quantity: every sample, the unit, and which side it belongs to."""

    name: str
    unit: str
    samples: list[float]

    @property
    def median(self) -> float:
        return statistics.median(self.samples)

    @property
    def low(self) -> float:
        return min(self.samples)

    @property
    def high(self) -> float:
        return max(self.samples)

    def text(self, digits: int = 2) -> str:
        """``median (min-max) unit``."""
        if len(self.samples) == 1:
            return f"{self.median:.{digits}f} {self.unit}"
        return (
            f"{self.median:.{digits}f} ({self.low:.{digits}f}-{self.high:.{digits}f}) {self.unit}"
        )


@dataclass
class Result:
    """What one benchmark process hands back to the runner."""

    row: str
    metrics: dict[str, Metric] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    load_before: tuple[float, float, float] = (0.0, 0.0, 0.0)
    load_after: tuple[float, float, float] = (0.0, 0.0, 0.0)
    busy: str = ""
    """Other users of the machine while the row ran (running QEMUs of other labs)."""

    def add(self, name: str, unit: str, samples: Iterable[float]) -> Metric:
        metric = Metric(name, unit, [float(s) for s in samples])
        self.metrics[name] = metric
        return metric

    def note(self, text: str) -> None:
        print(text, flush=True)
        self.notes.append(text)

    def dump(self, path: Path) -> None:
        data = asdict(self)
        path.write_text(json.dumps(data, indent=2) + "\n")

    @classmethod
    def load(cls, path: Path) -> Result:
        data = json.loads(path.read_text())
        metrics = {k: Metric(**v) for k, v in data.pop("metrics").items()}
        data["load_before"] = tuple(data["load_before"])
        data["load_after"] = tuple(data["load_after"])
        return cls(metrics=metrics, **data)


def alternate(
    contenders: dict[str, Callable[[], float | None]],
    *,
    runs: int,
    warmup: int = 1,
    between: Callable[[], None] | None = None,
) -> dict[str, list[float]]:
    """Seconds of each contender per measured run (its return value when it measures
    itself), the contenders taking turns run by run; ``between`` runs after every
    repetition, warm-up included, outside the timing.

    On a machine others share, load comes and goes; alternating spreads it
    over every contender instead of handing one of them a quiet minute.
    """
    samples: dict[str, list[float]] = {label: [] for label in contenders}
    for index in range(warmup + runs):
        for label, fn in contenders.items():
            started = time.perf_counter()
            measured = fn()
            seconds = measured if measured is not None else time.perf_counter() - started
            kind = "warm-up" if index < warmup else f"run {index - warmup + 1}/{runs}"
            print(f"  {label} {kind}: {seconds:.3f} s", flush=True)
            if index >= warmup:
                samples[label].append(seconds)
            if between is not None:
                between()
    return samples


# -- the machine ------------------------------------------------------------------


def _first_line(*cmd: str) -> str:
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=20, check=False)
    except OSError:
        return "not installed"
    text = (out.stdout or out.stderr).strip()
    return text.splitlines()[0] if text else "unknown"


def machine_info() -> dict[str, str]:
    """CPU model, cores, memory, versions of what is measured, load average."""
    cpu = "unknown"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    mem_kib = 0
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            mem_kib = int(line.split()[1])
    import libvirt  # only here: plan_scale must not need it

    major, rest = divmod(libvirt.getVersion(), 1_000_000)
    minor, micro = divmod(rest, 1000)
    from importlib.metadata import version

    import paramiko

    return {
        "CPU": cpu,
        "cores": str(os.cpu_count()),
        "memory": f"{mem_kib / 2**20:.1f} GiB",
        "kernel": platform.release(),
        "libvirt": f"{major}.{minor}.{micro} (libvirt-python {version('libvirt-python')})",
        "qemu": _first_line("qemu-system-x86_64", "--version"),
        "OpenSSH": _first_line("ssh", "-V"),
        "Python": f"{platform.python_version()}, paramiko {paramiko.__version__}",
        "load average": load_text(os.getloadavg()),
        "busy": busy_text(),
    }


def load_text(load: Iterable[float]) -> str:
    return " / ".join(f"{x:.2f}" for x in load) + " (1 / 5 / 15 min)"


def busy_text() -> str:
    """How many QEMU guests run on this machine, and in which lab host namespaces."""
    counts: Counter[str] = Counter()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes()
        except OSError:
            continue
        if not cmdline.startswith(b"/usr/bin/qemu-system"):
            continue
        counts["qemu"] += 1
    return f"{counts['qemu']} QEMU guest(s) running on the machine"


# -- the lab ----------------------------------------------------------------------


def lab_instance() -> str:
    return os.environ.get("PROXYFLEET_LAB_INSTANCE", "0")


def lab_up(hosts: int = 1, *, light: bool = False) -> dict[str, Any]:
    """``python -m lab up`` (idempotent) and the image; lab.json's content.

    ``light``: hosts with libvirtd and sshd only (``lab up --light``), for rows that start
    no guest. Hosts beyond ``hosts`` are removed, as ``lab up`` does."""
    from lab import config

    up = ("up", "--hosts", str(hosts), *(("--light",) if light else ()))
    for args in (("image",), up):
        proc = subprocess.run(
            [sys.executable, "-m", "lab", *args],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=3600,
            check=False,
        )
        if proc.returncode != 0:
            raise SystemExit(f"python -m lab {' '.join(args)} failed:\n{proc.stdout}{proc.stderr}")
    lab: dict[str, Any] = json.loads((config.STATE / "lab.json").read_text())
    return lab


def lab_hosts(lab: dict[str, Any]) -> list[Host]:
    """The lab's hosts as fleet.yaml would name them (guests on their bridges)."""
    return [
        Host(
            name=spec["name"],
            address=spec["address"],
            zone=spec["zone"],
            network=HostNetwork("bridge", spec["bridge"]),
        )
        for spec in lab["hosts"]
    ]


def lab_host(lab: dict[str, Any]) -> Host:
    """The lab's first host as fleet.yaml would name it (guests on its bridge)."""
    return lab_hosts(lab)[0]


def lab_ssh(lab: dict[str, Any]) -> SshSettings:
    """The lab's SSH key and known_hosts, as a daemon config would give them."""
    return SshSettings(key_file=Path(lab["sshKey"]), known_hosts_file=Path(lab["knownHosts"]))


def apply_config(path: Path, repo: Path, settings: str) -> list[str]:
    """Write a daemon config for ``repo`` with ``settings`` (YAML lines after ``repo``) to
    ``path``, as an operator would; the flags that give it to ``apply``."""
    path.write_text(f"repo:\n  url: {repo}\n{settings}")
    return ["--config", str(path)]


def apply_cmd(lab: dict[str, Any], repo: Path, state: Path, *flags: str) -> list[str]:
    """``proxyfleet apply --yes`` of ``repo`` against the lab's hosts with the lab's key and
    known_hosts and ``state`` as its state dir; ``flags`` after (``--json``, ``--no-wait``),
    or before ``apply`` when they are global (``-v``)."""
    verbose = [f for f in flags if f == "-v"]
    rest = [f for f in flags if f != "-v"]
    return [
        str(ROOT / ".venv" / "bin" / "proxyfleet"),
        *verbose,
        "apply",
        "--repo",
        str(repo),
        "--ssh-key",
        lab["sshKey"],
        "--known-hosts",
        lab["knownHosts"],
        "--state-dir",
        str(state),
        "--yes",
        *rest,
    ]


def bench_dir(name: str) -> Path:
    """A scratch directory of this benchmark under the lab instance's state (git-ignored)."""
    from lab import config

    path = config.STATE / "bench" / name
    path.mkdir(parents=True, exist_ok=True)
    return path


def fresh_dir(name: str) -> Path:
    path = bench_dir(name)
    shutil.rmtree(path)
    path.mkdir(parents=True)
    return path


POLICY = (
    "prune: true\n    maxDeletesPerRun: 50\n    drift: correct\n"
    "    overcommit: {cpu: 20, disk: 10, memory: 4}"
)
"""The benchmarks' fleet policy. The overcommit lets 20 one-vCPU proxies (and their
3 GiB overlays) onto one lab host of this 2-core machine, which placement's default
ratios (4 vCPUs per CPU) would block after 8. Memory too: libvirt's host memory is
the sum of the NUMA nodes' (``/sys/devices/system/node/node*/meminfo``), which on a
freshly booted machine of the project's kind was far less than ``/proc/meminfo``'s
(7.6-8.0 of 23.5 GiB on 2026-12-02, growing as memory was first used); the default
ratio 1 then blocks the 16th of these 512 MiB proxies (256 MiB and the TCG cache)."""


def fleet_yaml(
    name: str,
    *,
    machine: tuple[int, int, int] = (1, 256, 3),
    policy: str = POLICY,
    max_proxies: int = 1000,
    extra_images: str = "",
    zone_per_host: bool = False,
) -> str:
    """fleet.yaml on this lab instance: its hosts and images, one machine type ``tiny``;
    ``zone_per_host``: each host in a zone of its own, ``h<NN>`` by its place in the list."""
    from lab import config

    vcpus, memory, disk = machine
    images = "".join(f"  {line}\n" for line in config.IMAGES_YAML.read_text().splitlines()[1:])
    cap = f"      maxProxies: {max_proxies}\n"
    hosts, index = "", -1
    for line in config.HOSTS_YAML.read_text().splitlines()[1:]:
        if line.startswith("  - name"):
            index += 1
        if zone_per_host and line.strip().startswith("zone: "):
            line = f"    zone: h{index:02d}"
        hosts += f"  {line}\n" + (cap if line.startswith("  - name") else "")
    return (
        f"apiVersion: proxyfleet/v1\nkind: Fleet\nmetadata:\n  name: {name}\nspec:\n"
        + images
        + extra_images
        + "  machineTypes:\n    tiny:\n"
        + f"      vcpus: {vcpus}\n      memoryMiB: {memory}\n      diskGiB: {disk}\n"
        + hosts
        + f"  policy:\n    {policy}\n"
    )


def proxy_yaml(
    name: str,
    *,
    zone: str = "zone-a",
    image: str = "debian12-bios",
    host: str | None = None,
    replicas: int | None = None,
) -> str:
    """A Proxy manifest whose userData is a small cloud-config (as an operator would write);
    ``host`` pins it to one host (``placement.host``); ``replicas``: a ProxySet ``name`` of
    that many such proxies instead, each naming itself (``${proxy.name}``)."""
    pin = f"    host: {host}\n" if host else ""
    kind, own, count = (
        ("Proxy", name, "")
        if replicas is None
        else ("ProxySet", "${proxy.name}", f"  replicas: {replicas}\n")
    )
    return (
        f"apiVersion: proxyfleet/v1\nkind: {kind}\n"
        f"metadata:\n  name: {name}\n"
        f"spec:\n{count}  placement:\n    zone: {zone}\n{pin}    image: {image}\n"
        "    machineType: tiny\n"
        "  cloudInit:\n    userData: |\n      #cloud-config\n"
        f"      hostname: {own}\n      runcmd:\n        - [sh, -c, 'echo {own} > /run/bench']\n"
        "  health:\n    probeURL: http://10.79.0.1/generate_204\n    expectStatus: 204\n"
    )


def git(repo: Path, *args: str) -> str:
    out = subprocess.run(
        ["git", "-c", "user.name=bench", "-c", "user.email=bench@localhost", *args],
        cwd=repo,
        check=True,
        capture_output=True,
        text=True,
    )
    return out.stdout


# -- RPCs -------------------------------------------------------------------------


class RpcCounter:
    """The ``RpcObserver`` of a LibvirtHost: counts calls by RPC name, thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.calls: Counter[str] = Counter()
        self.first: dict[str, float] = {}

    def __call__(self, rpc: str, host: str, seconds: float, ok: bool) -> None:
        with self._lock:
            self.calls[rpc] += 1
            self.first.setdefault(rpc, time.monotonic())

    def take(self) -> Counter[str]:
        """The counts since the last ``take``."""
        with self._lock:
            calls, self.calls = self.calls, Counter()
            self.first = {}
        return calls


def mutating(calls: Counter[str]) -> int:
    return sum(n for rpc, n in calls.items() if MUTATING_RPC.fullmatch(rpc))


def emit(result: Result, json_path: str | None) -> None:
    result.load_after = os.getloadavg()
    if json_path:
        result.dump(Path(json_path))


def add_watch_argument(parser: argparse.ArgumentParser) -> None:
    """``--no-watch``: proxyfleet's hosts as a one-shot command builds them."""
    parser.add_argument(
        "--no-watch",
        dest="watch",
        action="store_false",
        help="read every owner in every observe, as a one-shot command does (the daemon "
        "keeps owners between cycles and reads again only what libvirt's events name)",
    )


def watch_note(watch: bool, cold: float, cold_rpcs: int) -> str:
    """How proxyfleet's hosts read owners in an idle row, and what its first cycle cost."""
    if watch:
        return (
            "proxyfleet's hosts as the daemon builds them (owners kept between cycles, read "
            "again when libvirt's domain events name a domain): its first cycle, which "
            f"reads every owner, took {cold:.3f} s with {cold_rpcs} RPCs (the warm-up, not in "
            "the figures)"
        )
    return (
        "proxyfleet's hosts as a one-shot command builds them (--no-watch: every owner read "
        f"in every observe); first cycle {cold:.3f} s with {cold_rpcs} RPCs"
    )
