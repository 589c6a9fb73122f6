"""``make demo``: the example fleet, for real, on the lab.

Brings up a mixed lab (one host per host of the example; the last, the office host, runs
Debian 13's libvirt 11 and QEMU 10, the others Debian 12's libvirt 9 and QEMU 7), builds or
reuses the guest image, renders a copy of ``examples/fleet-repo`` that points at the lab
into a local git repo, shows ``proxyfleet plan``, runs ``proxyfleet apply``, then lists
every proxy with host, IP and health and says how to look further and how to tear down.

The rendering changes only what the lab must: each image's URL and sha256 (the lab image,
which boots by either firmware, so each key keeps its own ``firmware``), the hosts (one lab
host per example host, keeping its zone and maxProxies; host pins follow the renaming) and
each Proxy's and ProxySet's health probe (the lab has no internet; every lab host answers
``http://10.79.0.1/generate_204``). In userData (inline, in fleet.yaml's proxyDefaults, or
in a userDataFile they name) only squid's ``acl NAME src`` lines change:
each that does not already cover the lab's management range (10.77.0.0/16, where the probes
come from) gets it appended, so that office proxies whose squid admits only 10.20.0.0/16
answer the lab's health check. Everything else in userData stays as written, ``packages:
[squid]`` included: the lab reaches no mirror, that module fails, and cloud-init still runs
the runcmd that enables and starts the squid the lab image ships installed but off.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.scalarstring import LiteralScalarString

from lab import cli, config

EXAMPLE = config.LAB_DIR.parent / "examples" / "fleet-repo"
DEMO = config.STATE / "demo"
REPO = DEMO / "fleet-repo"
PF_STATE = DEMO / "proxyfleet-state"
LAB_CLIENTS = ipaddress.IPv4Network("10.77.0.0/16")
"""Where requests from the lab's root namespace come from (the host uplinks)."""
DEGRADED = 3
"""``proxyfleet apply``'s exit code when it succeeded but not every proxy is healthy."""
SETTLE_SECONDS = 900
SETTLE_POLL = 20
SQUID_ACL = re.compile(r"^(?P<acl>[ \t]*acl[ \t]+\S+[ \t]+src)(?P<nets>[^\n]*?)[ \t]*$", re.M)


def admit_lab(user_data: str) -> str:
    """``user_data`` with the lab's management range added to squid ``src`` ACLs lacking it."""

    def covered(nets: list[str]) -> bool:
        for net in nets:
            try:
                parsed = ipaddress.ip_network(net, strict=False)
            except ValueError:
                continue
            if isinstance(parsed, ipaddress.IPv4Network) and LAB_CLIENTS.subnet_of(parsed):
                return True
        return False

    def fix(m: re.Match[str]) -> str:
        if covered(m["nets"].split()):
            return m[0]
        return f"{m['acl']}{m['nets']} {LAB_CLIENTS}"

    return SQUID_ACL.sub(fix, user_data)


def _yaml() -> YAML:
    yaml = YAML()
    yaml.preserve_quotes = True
    yaml.width = 4096
    return yaml


def render(lab: dict[str, Any]) -> Path:
    """Copy the example repo into a fresh git repo under lab/state/demo, pointed at the lab."""
    shutil.rmtree(REPO, ignore_errors=True)
    shutil.copytree(EXAMPLE, REPO)
    render_files(REPO, lab)
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "lab",
        "GIT_AUTHOR_EMAIL": "lab@localhost",
        "GIT_COMMITTER_NAME": "lab",
        "GIT_COMMITTER_EMAIL": "lab@localhost",
    }
    for cmd in (
        ["git", "init", "-q", "-b", "main"],
        ["git", "add", "-A"],
        ["git", "commit", "-q", "-m", "Example fleet, rendered for the lab"],
    ):
        subprocess.run(cmd, cwd=REPO, check=True, env=env)
    return REPO


def render_files(repo: Path, lab: dict[str, Any]) -> None:
    """Point the copy of the example at ``repo`` at the lab, in place (see the module doc).

    Proxy and ProxySet documents get the lab's probe and their pins renamed; squid ACLs are
    widened wherever userData is written: inline in a manifest, in fleet.yaml's
    ``spec.proxyDefaults``, or in a ``userDataFile`` any of them names.
    """
    yaml = _yaml()
    fleet_file = repo / "fleet.yaml"
    fleet = yaml.load(fleet_file)
    spec = fleet["spec"]
    for image in spec["images"].values():
        image["url"] = lab["image"]["url"]
        image["sha256"] = lab["image"]["sha256"]
        image["format"] = "qcow2"
    renamed: dict[str, str] = {}
    hosts = []
    for example, host in zip(spec["hosts"], lab["hosts"], strict=True):
        renamed[str(example["name"])] = host["name"]
        entry = {
            "name": host["name"],
            "address": host["address"],
            "port": host["port"],
            "user": host["user"],
            "zone": example["zone"],
            "pool": "default",
            "network": {"bridge": "br0"},
            "domainType": "qemu",
            "cpuMode": "none",
        }
        if "maxProxies" in example:
            entry["maxProxies"] = example["maxProxies"]
        hosts.append(entry)
    spec["hosts"] = hosts
    user_data_files = {*_admit_lab_in(spec.get("proxyDefaults") or {})}
    yaml.dump(fleet, fleet_file)
    for path in sorted(repo.rglob("*.yaml")):
        if path == fleet_file:
            continue
        docs = list(yaml.load_all(path))
        for doc in docs:
            if isinstance(doc, dict) and doc.get("kind") in ("Proxy", "ProxySet"):
                user_data_files.update(_admit_lab_in(doc["spec"]))
                health = doc["spec"].setdefault("health", {})
                health["probeURL"] = lab["probeUrl"]
                health["expectStatus"] = 204
                placement = doc["spec"].get("placement") or {}
                if placement.get("host") in renamed:
                    placement["host"] = renamed[placement["host"]]
        yaml.dump_all(docs, path)
    for name in sorted(user_data_files):
        target = repo / name
        target.write_text(admit_lab(target.read_text()))


def _admit_lab_in(spec: dict[str, Any]) -> list[str]:
    """Widen the inline userData of a Proxy spec (or fleet.yaml's proxyDefaults) in place;
    the userDataFile it names, if any."""
    cloud_init = spec.get("cloudInit") or {}
    if isinstance(cloud_init.get("userData"), str):
        cloud_init["userData"] = LiteralScalarString(admit_lab(cloud_init["userData"]))
    named = cloud_init.get("userDataFile")
    return [str(named)] if isinstance(named, str) else []


def proxyfleet(*args: str) -> int:
    cmd = [sys.executable, "-m", "reconciler", *args]
    print(f"\n$ proxyfleet {' '.join(args)}", flush=True)
    return subprocess.run(cmd, check=False).returncode


def main() -> int:
    if os.geteuid() != 0:
        print("make demo needs root (the lab makes namespaces, links and mounts)", file=sys.stderr)
        return 1
    started = time.monotonic()
    example_hosts = len(_yaml().load(EXAMPLE / "fleet.yaml")["spec"]["hosts"])
    print(
        f"== lab up ({example_hosts} hosts, one per host of the example fleet; the last a "
        "Debian 13 host: libvirt 11, QEMU 10)",
        flush=True,
    )
    cli.up(example_hosts, debian13=1)
    print("\n== guest image", flush=True)
    cli.image(force=False)
    lab = json.loads(config.LAB_JSON.read_text())
    print(f"\n== rendering {EXAMPLE.relative_to(config.LAB_DIR.parent)} for the lab", flush=True)
    repo = render(lab)
    print(f"fleet repo: {repo} (a git repo; fleet.yaml points at the lab hosts)")
    access = ["--repo", str(repo), "--ssh-key", lab["sshKey"], "--known-hosts", lab["knownHosts"]]
    if proxyfleet("validate", str(repo)) != 0:
        return 1
    if proxyfleet("plan", *access) == 1:
        return 1
    code = proxyfleet("apply", "--yes", *access, "--state-dir", str(PF_STATE))
    settle_by = time.monotonic() + SETTLE_SECONDS
    while code == DEGRADED and time.monotonic() < settle_by:
        # apply waits a bounded time for new VMs; on a busy machine cloud-init may still be
        # starting squid. A repeated apply changes nothing and checks every proxy again.
        print(
            f"\n== not every proxy is healthy yet; applying again in {SETTLE_POLL} s "
            f"(up to {SETTLE_SECONDS // 60} min in all)",
            flush=True,
        )
        time.sleep(SETTLE_POLL)
        code = proxyfleet("apply", "--yes", *access, "--state-dir", str(PF_STATE))
    proxyfleet("inventory", *access)
    minutes = (time.monotonic() - started) / 60
    key, known = lab["sshKey"], lab["knownHosts"]
    print(
        f"\n== done in {minutes:.1f} min (apply exit {code})\n"
        "Look further:\n"
        f"  .venv/bin/proxyfleet plan {' '.join(access)}\n"
        f"  .venv/bin/python -m lab status\n"
        f"  ssh -i {key} -o UserKnownHostsFile={known} root@{config.HostLayout(1).address} "
        "virsh -c qemu:///system list --all\n"
        "  curl -x http://<proxy IP>:3128 http://10.79.0.1/generate_204 -w '%{http_code}\\n'\n"
        f"  edit {repo}/proxies/*.yaml, commit, and run apply again\n"
        "Tear down:\n"
        "  make lab-down      (removes every namespace, process, bridge and route of the lab)",
        flush=True,
    )
    return code


if __name__ == "__main__":
    raise SystemExit(main())
