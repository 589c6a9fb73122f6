"""End to end on the lab: a host cordoned, then drained for maintenance (issue 43).

Two lab hosts in one zone and one proxy, so two TCG boots in all:

1. The first host (the one placement picks on a tie) is ``state: cordoned``: the new
   proxy lands on the second.
2. The second is ``state: draining`` and the first active again: applies replace the
   proxy on the first host; while they run, a thread fetches the lab's probe through the
   old and the new VM every 2 s. Some VM answers at every sample, the old VM is deleted
   only by a run after the one that found the new VM healthy, and the drained host is
   reported empty.

Each apply acts and returns (issue 39): the test runs applies until the fleet settles,
as the daemon's runs would.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest
from labutil import Applied, apply, domains, git, probe_through, squid_user_data

from lab import config as lab_config

LAB_HOSTS = 2
PROXY = "mover"
SETTLE_SECONDS = 1500  # two TCG boots on a machine shared with other labs take minutes


class Repo:
    """The module's fleet repo: two hosts of zone-a whose ``state`` the tests set."""

    def __init__(self, lab: dict[str, Any], root: Path) -> None:
        self.lab, self.root, self.runs = lab, root, 0
        self.first, self.second = (h["name"] for h in lab["hosts"])

    def write(self, states: dict[str, str], message: str) -> None:
        images = (lab_config.STATE / "images.yaml").read_text().splitlines()[1:]
        hosts = "".join(
            f"    - name: {h['name']}\n      address: {h['address']}\n      port: {h['port']}\n"
            f"      user: {h['user']}\n      zone: zone-a\n      pool: default\n"
            "      network: {bridge: br0}\n      domainType: qemu\n      cpuMode: none\n"
            + (f"      state: {states[h['name']]}\n" if h["name"] in states else "")
            for h in self.lab["hosts"]
        )
        (self.root / "fleet.yaml").write_text(
            "apiVersion: proxyfleet/v1\nkind: Fleet\nmetadata:\n  name: drain\nspec:\n"
            + "".join(f"  {line}\n" for line in images)
            + "  machineTypes:\n    tiny:\n      vcpus: 1\n      memoryMiB: 512\n"
            "      diskGiB: 4\n  hosts:\n" + hosts + "  policy:\n    maxDeletesPerRun: 5\n"
        )
        git(self.root, "add", "-A")
        git(self.root, "commit", "-q", "-m", message)

    def apply(self) -> Applied:
        self.runs += 1
        # One run per apply (--no-wait): the test steps through the drain run by run, as
        # the daemon's runs go, and learns the new VM's address before the run that deletes
        # the old one.
        log = self.root.parent / f"apply-{self.runs}.log"
        return apply(self.lab, self.root, log, "--no-wait")

    def until(self, done: Any, what: str) -> list[Applied]:
        """Applies, 15 s apart, until ``done(applied)``; every one of them."""
        runs: list[Applied] = []
        deadline = time.monotonic() + SETTLE_SECONDS
        while True:
            runs.append(self.apply())
            outcomes = runs[-1].result["outcomes"]
            assert all(o["result"] == "succeeded" for o in outcomes), outcomes
            if done(runs[-1]):
                return runs
            assert time.monotonic() < deadline, f"{what}: {runs[-1].result['proxies']}"
            time.sleep(15)


def served(applied: Applied) -> dict[str, Any] | None:
    """The proxy's entry when it is healthy."""
    entry = applied.proxies()[PROXY]
    return entry if entry["health"] == "healthy" else None


class Fetcher:
    """Fetches the lab's probe through the old and (once known) the new VM every 2 s."""

    def __init__(self, url: str, old_ip: str) -> None:
        self.url, self.old_ip, self.new_ip = url, old_ip, ""
        self.samples: list[tuple[float, int | None, int | None]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Fetcher:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=60)

    def alone(self) -> bool:
        """A sample answered by the new VM while the old one did not."""
        return any(old != 204 and new == 204 for _, old, new in self.samples)

    def _run(self) -> None:
        while not self._stop.is_set():
            new_ip = self.new_ip
            old = probe_through(self.old_ip, self.url).status
            new = probe_through(new_ip, self.url).status if new_ip else None
            self.samples.append((time.time(), old, new))
            self._stop.wait(2)


@pytest.fixture(scope="module")
def repo(lab: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> Repo:
    assert len(lab["hosts"]) == LAB_HOSTS
    root = tmp_path_factory.mktemp("drain") / "fleet"
    (root / "proxies").mkdir(parents=True)
    user_data = "".join(f"      {line}\n" for line in squid_user_data(PROXY).split("\n"))
    (root / "proxies" / f"{PROXY}.yaml").write_text(
        "apiVersion: proxyfleet/v1\nkind: Proxy\n"
        f"metadata:\n  name: {PROXY}\n"
        "spec:\n  placement:\n    zone: zone-a\n    image: debian12\n    machineType: tiny\n"
        "  cloudInit:\n    userData: |\n" + user_data.rstrip(" \n") + "\n"
        f"  health:\n    probeURL: {lab['probeUrl']}\n    expectStatus: 204\n"
        "    timeoutSeconds: 10\n"
    )
    git(root, "init", "-q", "-b", "main")
    return Repo(lab, root)


def test_a_new_proxy_goes_past_a_cordoned_host(repo: Repo) -> None:
    repo.write({repo.first: "cordoned"}, f"cordon {repo.first}")
    runs = repo.until(served, "the proxy never served")
    (create,) = runs[0].actions("create")
    assert create["host"] == repo.second, create
    entry = served(runs[-1])
    assert entry is not None and entry["host"] == repo.second, entry
    hosts = {h["name"]: h for h in runs[-1].result["hosts"]}
    assert hosts[repo.first]["state"] == "cordoned" and hosts[repo.first]["owned"] == 0, hosts


def test_a_drained_host_hands_its_proxy_over_and_is_reported_empty(repo: Repo) -> None:
    before = repo.apply()
    entry = served(before)
    assert entry is not None and entry["host"] == repo.second, before.result["proxies"]
    old, old_ip = entry["domain"], entry["ip"]
    repo.write({repo.second: "draining"}, f"drain {repo.second}, uncordon {repo.first}")
    started = time.time()
    with Fetcher(repo.lab["probeUrl"], old_ip) as fetcher:

        def moved(applied: Applied) -> bool:
            now = served(applied)
            if now is not None and now["domain"] != old:
                fetcher.new_ip = now["ip"]  # known before the run that may delete the old
            return old not in domains(repo.second)

        runs = repo.until(moved, "the old VM was never deleted")
        alone = time.monotonic() + 60
        while not fetcher.alone() and time.monotonic() < alone:
            time.sleep(2)
    (replace,) = runs[0].actions("replace")
    assert replace["host"] == repo.first and f"host {repo.second} is draining" in replace["reason"]
    (delete,) = [a for r in runs for a in r.actions("delete")]
    assert delete["domain"] == old and "which is healthy" in delete["reason"], delete
    assert fetcher.new_ip, "the old VM was deleted before a run found the new one healthy"
    samples = fetcher.samples
    assert samples and all(204 in (o, n) for _, o, n in samples), samples
    assert fetcher.alone(), samples  # the sampler sees a VM gone, and the new one carries
    print(
        f"drain took {time.time() - started:.0f} s over {len(runs)} applies; "
        f"{len(samples)} samples, every one answered"
    )
    final = repo.apply()
    kinds = {a["action"] for a in final.result["plan"]["actions"]}
    assert final.code == 0 and kinds <= {"keep", "cleanup"}, final.result  # the old base
    entry = served(final)
    assert entry is not None and entry["host"] == repo.first, entry
    hosts = {h["name"]: h for h in final.result["hosts"]}
    assert hosts[repo.second]["state"] == "draining" and hosts[repo.second]["owned"] == 0, hosts
