"""The worst fleet repos the load's limits allow, each loaded by ``proxyfleet validate``.

Run: ``.venv/bin/python -m benchmarks.load_worst`` (not part of ``make bench``: no
lab needed). Prints, per repo, the wall and CPU seconds and the peak RSS of a fresh
``proxyfleet validate`` process; asserts nothing. The budget docs/security.md states
("Worst load") is at most 300 MB and 10 s on the 2-core development machine.

Each repo is built to the default limits (reconciler.core.load.repofiles.ReadLimits,
reconciler.core.load.expansion.ExpandLimits): as many bytes, values, proxies and
userData bytes as they let through, so each stresses one bound and the load stops at
it (or just fits).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from reconciler.core.load.expansion import ExpandLimits
from reconciler.core.load.repofiles import ReadLimits

READ = ReadLimits()
EXPAND = ExpandLimits()
FLEET = """apiVersion: proxyfleet/v1
kind: Fleet
metadata: {name: worst}
spec:
  images:
    debian:
      url: https://cloud.debian.org/images/cloud/bookworm/latest/debian-12-genericcloud-amd64.qcow2
      sha256: 32a9d30d18803da72f5936cf2b7b9efcb4d0bb63c67933f17e3bdfd1751de3f3
  machineTypes:
    small: {vcpus: 1, memoryMiB: 1024, diskGiB: 10}
  hosts:
    - {name: kvm-a, address: 192.0.2.10, zone: lab, network: {bridge: br0}}
"""
PROXY = """---
apiVersion: proxyfleet/v1
kind: Proxy
metadata:
  name: p{file}-{n}
  labels: {{role: web, tier: front}}
spec:
  placement: {{zone: lab, image: debian, machineType: small}}
  cloudInit:
    userData: |
      #cloud-config
      hostname: p{file}-{n}
      packages: [squid]
"""
PROXY_SET = """---
apiVersion: proxyfleet/v1
kind: ProxySet
metadata: {{name: set{n}}}
spec:
  replicas: {replicas}
  placement: {{zone: lab, image: debian, machineType: small}}
  cloudInit: {{userDataFile: {file}}}
"""


def files_of(size: int) -> int:
    """Manifest files of ``size`` bytes that fit the repo limit beside fleet.yaml."""
    return (READ.max_repo_bytes - len(FLEET)) // size


def dense_manifests(root: Path) -> None:
    """Valid-looking Proxy documents, 512,000 bytes a file, up to the repo limit."""
    for f in range(files_of(512_000)):
        parts, total, n = [], 0, 0
        while total < 512_000 - len(PROXY) - 20:
            parts.append(PROXY.format(file=f, n=n))
            total += len(parts[-1])
            n += 1
        (root / f"m{f:02d}.yaml").write_text("".join(parts))


def comments(root: Path) -> None:
    """Files of one comment line each, at the file limit, up to the repo limit."""
    for f in range(files_of(READ.max_file_bytes)):
        (root / f"c{f:02d}.yaml").write_text("#" + "x" * (READ.max_file_bytes - 2) + "\n")


def dense_values_then_comments(root: Path) -> None:
    """A list just under the value budget, then comments up to the repo limit."""
    values = EXPAND.max_values - 100
    (root / "a.yaml").write_text("[" + ",".join("1" * values) + "]\n")
    left = READ.max_repo_bytes - len(FLEET) - 2 * values - 2
    for f in range(left // READ.max_file_bytes):
        (root / f"c{f:02d}.yaml").write_text("#" + "x" * (READ.max_file_bytes - 2) + "\n")


def replicas_bomb(root: Path) -> None:
    (root / "bomb.yaml").write_text(
        "apiVersion: proxyfleet/v1\nkind: ProxySet\nmetadata: {name: bomb}\n"
        "spec:\n  replicas: 1000000000\n"
        "  placement: {zone: lab, image: debian, machineType: small}\n"
    )


def sets_with_file(root: Path, *, text_bytes: int, sets: int) -> None:
    """``sets`` ProxySets of 1,000 sharing one userDataFile of ``text_bytes`` using
    ``${proxy.name}``: a distinct text per member, mostly a block of file content."""
    head = (
        "#cloud-config\nhostname: ${proxy.name}\n"
        "write_files:\n  - path: /etc/squid/extra.conf\n    content: |\n"
    )
    line = "      acl net src 10.0.0.0/8 # padding padding padding padding padding\n"
    body = line * ((text_bytes - len(head)) // len(line))
    (root / "squid.cloud-config").write_text(head + body)
    manifest = "".join(
        PROXY_SET.format(n=n, replicas=1000, file="squid.cloud-config") for n in range(sets)
    )
    (root / "sets.yaml").write_text(manifest)


def all_at_once(root: Path) -> None:
    """Each bound nearly reached in one repo: the sum of the worst costs."""
    sets_with_file(root, text_bytes=1500, sets=2)
    values = EXPAND.max_values - 2000 * 12  # what the 2,000 cloud-configs leave
    (root / "a.yaml").write_text("[" + ",".join("1" * values) + "]\n")
    left = READ.max_repo_bytes - sum(p.stat().st_size for p in root.iterdir()) - 2 * values
    for f in range(left // READ.max_file_bytes):
        (root / f"c{f:02d}.yaml").write_text("#" + "x" * (READ.max_file_bytes - 2) + "\n")


SCENARIOS: dict[str, Callable[[Path], None]] = {
    "dense manifests (Proxy documents, 512,000 B a file, to maxRepoBytes)": dense_manifests,
    "comments (1 MiB files to maxRepoBytes)": comments,
    "a list at the value budget, then comments to maxRepoBytes": dense_values_then_comments,
    "ProxySet with replicas: 1000000000": replicas_bomb,
    "2 ProxySets of 1,000 x one 1 MiB userDataFile with ${proxy.name}": lambda root: sets_with_file(
        root, text_bytes=READ.max_file_bytes - 64, sets=2
    ),
    "2 ProxySets of 1,000 x one 1.5 KiB userDataFile with ${proxy.name} (fits)": lambda root: (
        sets_with_file(root, text_bytes=1500, sets=2)
    ),
    "all at once: those 2 sets, a list near the value budget, comments": all_at_once,
}


CHILD = """
import resource, sys
from reconciler.cli import main
try:
    main(sys.argv[1:])
finally:
    u = resource.getrusage(resource.RUSAGE_SELF)
    print("RUSAGE", u.ru_utime + u.ru_stime, u.ru_maxrss, flush=True)
"""


def measure(build: Callable[[Path], None]) -> tuple[float, float, float, str]:
    """(wall s, CPU s, peak RSS MB, validate's last stderr line) of one fresh validate."""
    with tempfile.TemporaryDirectory(prefix="pf-worst-") as tmp:
        root = Path(tmp)
        (root / "fleet.yaml").write_text(FLEET)
        build(root)
        start = time.monotonic()
        done = subprocess.run(
            [sys.executable, "-c", CHILD, "validate", tmp],
            capture_output=True,
            text=True,
            check=False,
        )
        wall = time.monotonic() - start
    usage = done.stdout.strip().splitlines()[-1].split()
    lines = (done.stderr or done.stdout).strip().splitlines()[:1]
    return wall, float(usage[1]), int(usage[2]) / 1024, lines[-1][:160] if lines else ""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--only", help="run the scenarios whose name holds this text")
    args = parser.parse_args(argv)
    print(f"limits: {READ} {EXPAND}; {os.cpu_count()} cores, load {os.getloadavg()[0]:.2f}")
    for name, build in SCENARIOS.items():
        if args.only and args.only not in name:
            continue
        wall, cpu, rss, last = measure(build)
        print(f"{name}: {wall:.1f} s wall, {cpu:.1f} s CPU, peak RSS {rss:.0f} MB\n    {last}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
