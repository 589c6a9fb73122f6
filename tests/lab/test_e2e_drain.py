"""End to end on the lab: a host cordoned, then drained for maintenance (issue 43).

Two lab hosts in one zone and two proxies, so four TCG boots in all:

1. The first host (the one placement picks on a tie) is ``state: cordoned``: both new
   proxies land on the second.
2. The second is ``state: draining`` and the first active again: applies replace both
   proxies on the first host (``rollout.maxSurge: 2``: one batch, to keep the test's
   wall time to two boots at once); while they run, a thread fetches the lab's probe
   through every VM of each proxy every 2 s. At least one of the two proxies answers at
   every sample, each old VM is deleted only by a run after the one that found its new VM
   healthy, and the drained host is reported empty.

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
PROXIES = ("mover-1", "mover-2")
SETTLE_SECONDS = 2400  # two TCG boots at once on a machine shared with other labs take minutes


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
            "    rollout:\n      maxSurge: 2\n"
        )
        git(self.root, "add", "-A")
        git(self.root, "commit", "-q", "-m", message)

    def apply(self) -> Applied:
        self.runs += 1
        # One run per apply (--no-wait): the test steps through the drain run by run, as
        # the daemon's runs go, and learns the new VMs' addresses before the run that
        # deletes the old ones.
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


def served(applied: Applied) -> dict[str, dict[str, Any]]:
    """The healthy proxies' entries, by name."""
    return {n: p for n, p in applied.proxies().items() if p["health"] == "healthy"}


class Fetcher:
    """Fetches the lab's probe through every known VM of each proxy every 2 s."""

    def __init__(self, url: str, old_ips: dict[str, str]) -> None:
        self.url = url
        self.ips = {name: [ip] for name, ip in old_ips.items()}  # old first, then the new
        self.samples: list[dict[str, tuple[int | None, ...]]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Fetcher:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=60)

    def learn(self, name: str, ip: str) -> None:
        if ip not in self.ips[name]:
            self.ips[name] = [*self.ips[name], ip]

    def answering(self, sample: dict[str, tuple[int | None, ...]]) -> int:
        """Proxies some VM of which answered in ``sample``."""
        return sum(204 in statuses for statuses in sample.values())

    def alone(self, name: str) -> bool:
        """A sample in which ``name``'s new VM answered while its old one did not."""
        return any(
            len(s[name]) == 2 and s[name][0] != 204 and s[name][1] == 204 for s in self.samples
        )

    def _run(self) -> None:
        while not self._stop.is_set():
            known = {name: list(ips) for name, ips in self.ips.items()}
            self.samples.append(
                {
                    name: tuple(probe_through(ip, self.url).status for ip in ips)
                    for name, ips in known.items()
                }
            )
            self._stop.wait(2)


@pytest.fixture(scope="module")
def repo(lab: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> Repo:
    assert len(lab["hosts"]) == LAB_HOSTS
    root = tmp_path_factory.mktemp("drain") / "fleet"
    (root / "proxies").mkdir(parents=True)
    for proxy in PROXIES:
        user_data = "".join(f"      {line}\n" for line in squid_user_data(proxy).split("\n"))
        (root / "proxies" / f"{proxy}.yaml").write_text(
            "apiVersion: proxyfleet/v1\nkind: Proxy\n"
            f"metadata:\n  name: {proxy}\n"
            "spec:\n  placement:\n    zone: zone-a\n    image: debian12\n    machineType: tiny\n"
            "  cloudInit:\n    userData: |\n" + user_data.rstrip(" \n") + "\n"
            f"  health:\n    probeURL: {lab['probeUrl']}\n    expectStatus: 204\n"
            "    timeoutSeconds: 10\n"
        )
    git(root, "init", "-q", "-b", "main")
    return Repo(lab, root)


def test_new_proxies_go_past_a_cordoned_host(repo: Repo) -> None:
    repo.write({repo.first: "cordoned"}, f"cordon {repo.first}")
    runs = repo.until(lambda a: len(served(a)) == len(PROXIES), "the proxies never served")
    creates = runs[0].actions("create")
    assert sorted(c["proxy"] for c in creates) == list(PROXIES), creates
    assert {c["host"] for c in creates} == {repo.second}, creates
    assert {p["host"] for p in served(runs[-1]).values()} == {repo.second}, runs[-1].result
    hosts = {h["name"]: h for h in runs[-1].result["hosts"]}
    assert hosts[repo.first]["state"] == "cordoned" and hosts[repo.first]["owned"] == 0, hosts


def test_a_drained_host_hands_both_proxies_over_and_is_reported_empty(repo: Repo) -> None:
    before = served(repo.apply())
    assert set(before) == set(PROXIES), before
    assert {p["host"] for p in before.values()} == {repo.second}, before
    old = {name: p["domain"] for name, p in before.items()}
    repo.write({repo.second: "draining"}, f"drain {repo.second}, uncordon {repo.first}")
    started = time.time()
    with Fetcher(repo.lab["probeUrl"], {n: p["ip"] for n, p in before.items()}) as fetcher:

        def moved(applied: Applied) -> bool:
            for name, now in served(applied).items():
                if now["domain"] != old[name]:
                    fetcher.learn(name, now["ip"])  # known before the run that may delete
            return not set(old.values()) & set(domains(repo.second))

        runs = repo.until(moved, "the old VMs were never deleted")
        alone = time.monotonic() + 60
        while not all(fetcher.alone(n) for n in PROXIES) and time.monotonic() < alone:
            time.sleep(2)
    replaces = [a for r in runs for a in r.actions("replace")]
    assert sorted(a["proxy"] for a in replaces) == list(PROXIES), replaces
    for replace in replaces:
        assert replace["host"] == repo.first, replace
        assert f"host {repo.second} is draining" in replace["reason"], replace
    deletes = [a for r in runs for a in r.actions("delete")]
    assert sorted(d["domain"] for d in deletes) == sorted(old.values()), deletes
    assert all("which is healthy" in d["reason"] for d in deletes), deletes
    assert all(len(fetcher.ips[n]) == 2 for n in PROXIES), fetcher.ips  # learnt in time
    samples = fetcher.samples
    answering = [fetcher.answering(s) for s in samples]
    assert samples and min(answering) >= 1, samples  # never fewer than 1 of 2 answering
    assert all(fetcher.alone(n) for n in PROXIES), samples  # each new VM carries alone
    print(
        f"drain of {len(PROXIES)} proxies took {time.time() - started:.0f} s over "
        f"{len(runs)} applies; {len(samples)} samples, {answering.count(2)} with 2 of 2 "
        f"answering, {answering.count(1)} with 1 of 2, none with fewer"
    )
    final = repo.apply()
    kinds = {a["action"] for a in final.result["plan"]["actions"]}
    assert final.code == 0 and kinds <= {"keep", "cleanup"}, final.result  # the old base
    assert {p["host"] for p in served(final).values()} == {repo.first}, final.result
    assert set(served(final)) == set(PROXIES), final.result
    hosts = {h["name"]: h for h in final.result["hosts"]}
    assert hosts[repo.second]["state"] == "draining" and hosts[repo.second]["owned"] == 0, hosts
