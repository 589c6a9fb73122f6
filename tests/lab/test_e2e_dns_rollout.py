"""Clients that follow a ProxySet's DNS name through an image rollout (issue 41).

A real BIND 9 (tests/bindserver.py: a dynamic zone and a ``tsig-keygen`` key) on
127.0.0.1:46053, and ``proxyfleet run`` as a process (interval INTERVAL s, the rig of
test_e2e_day2.py) whose config's ``dns`` publishes the fleet's names there with TTL
TTL s. One ProxySet ``pfs`` of three UEFI proxies on the two lab hosts. ``apply`` does
not publish (docs/configuration.md), so the daemon drives it.

An image update (the lab image's zstd copy, lab.imageupdate.recompressed, served by the
lab's image server) rolls all three with ``maxSurge: 3, maxUnavailable: 0``: every new VM
boots beside its old one, which serves until its successor is healthy. Meanwhile a
client resolves ``pfs.set.proxies.example.org`` through the BIND every second with
dnspython, caching each answer for its TTL as a resolver library does, and fetches the
lab's probe URL through squid at every address it got. No address it got stays dark
(no 204) longer than TTL + one run interval (+ the sampling period): a deleted VM's
address leaves the name by the end of the run that deleted it. Once rolled, ``dig``
shows each proxy's name on its new VM's address (from the status branch) and the set's
name holding exactly the three new addresses.

Six TCG boots, three at a time (~2 create-to-healthy times): 956 s in all at a load
of 11 (2026-12-06: 398 s to three healthy proxies, 467 s commit to rolled; 472
resolutions, longest non-answering streak 0 s against a bound of 16 s). Stream A of
lab.suite (``FIRST``, right after test_e2e_day2.py, whose two Debian 12 hosts it keeps).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import dns.exception
import dns.resolver
import pytest
from bindserver import KEY, ZONE, Bind
from labutil import Probe, probe_through
from test_e2e_day2 import (
    REPLACE_TIMEOUT,
    Rig,
    fleet_yaml,
    halted_report,
    of_proxy,
    proxy_yaml,
    running_rig,
    vms,
)

from lab import config as lab_config
from lab import imagebuild, imageupdate
from lab.sampling import Periodic

LAB_HOSTS = 2
FLEET = "e2es"
PREFIX = f"pf-{FLEET}-"
SET = "pfs"
PROXIES = tuple(f"{SET}-{n}" for n in range(3))
BIND_PORT = 46053
TTL = 5
INTERVAL = 10
EVERY = 1.0
"""Seconds between the client's resolutions."""
ROLLOUT = "maxSurge: 3\nmaxUnavailable: 0"
SET_NAME = f"{SET}.set"


def set_yaml(probe_url: str, generation: int) -> str:
    """The ProxySet: day 2's proxy, three of it, each squid's Via naming its own proxy."""
    one = proxy_yaml(SET, probe_url, generation)
    made = (
        one.replace("kind: Proxy\n", "kind: ProxySet\n", 1)
        .replace("spec:\n", "spec:\n  replicas: 3\n", 1)
        .replace(f"visible_hostname {SET}-g", "visible_hostname ${proxy.name}-g", 1)
    )
    assert made.count("ProxySet") == 1 and "${proxy.name}" in made, made
    return made


def dns_config(bind: Bind) -> str:
    return (
        f"dns:\n  server: 127.0.0.1:{BIND_PORT}\n  zone: {ZONE}\n"
        f"  tsig:\n    name: {KEY}\n    algorithm: hmac-sha256\n"
        f"    secretFile: {bind.secret_file}\n"
        f"  ttl: {TTL}\n  policy: sync\n"
    )


@pytest.fixture(scope="module")
def bind(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bind]:
    server = Bind(tmp_path_factory.mktemp("bind"), BIND_PORT)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def rig(lab: dict[str, Any], bind: Bind, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rig]:
    files: dict[str, str | None] = {
        "fleet.yaml": fleet_yaml(lab, rollout=ROLLOUT, fleet=FLEET),
        f"proxies/{SET}.yaml": set_yaml(lab["probeUrl"], 1),
    }
    tmp = tmp_path_factory.mktemp("dns-e2e")
    with running_rig(
        lab,
        tmp,
        "A ProxySet of three behind its DNS name",
        files,
        names=PROXIES,
        interval=INTERVAL,
        extra_config=dns_config(bind),
    ) as rig:
        yield rig


class Client(Periodic):
    """Resolves the set's name every EVERY s through the BIND (answers cached for their
    TTL) and fetches the probe URL through every address it got, each fetch in a thread
    of its own so that a dark address does not slow the resolutions."""

    def __init__(self, port: int, url: str) -> None:
        super().__init__(EVERY)
        self.url = url
        self.resolver = dns.resolver.Resolver(configure=False)
        self.resolver.nameservers = ["127.0.0.1"]
        self.resolver.port = port
        self.resolver.lifetime = 3.0
        self.resolver.cache = dns.resolver.Cache()
        self.pool = ThreadPoolExecutor(max_workers=32)
        self.fetches: list[tuple[float, str, Future[Probe]]] = []
        self.resolved: list[tuple[float, tuple[str, ...]]] = []

    def look(self) -> None:
        when = time.time()
        try:
            answer = self.resolver.resolve(f"{SET_NAME}.{ZONE}", "A")
            got = tuple(sorted(r.address for r in answer))
        except dns.exception.DNSException:
            got = ()
        self.resolved.append((when, got))
        for address in got:
            self.fetches.append((when, address, self.pool.submit(probe_through, address, self.url)))

    def samples(self) -> list[tuple[float, dict[str, bool]]]:
        """(time, {address got: answered 204}) of every resolution, in order."""
        self.pool.shutdown(wait=True)
        answered: dict[float, dict[str, bool]] = {when: {} for when, _ in self.resolved}
        for when, address, fetch in self.fetches:
            answered[when][address] = fetch.result().status == 204
        return sorted(answered.items())


def longest_dark(samples: list[tuple[float, dict[str, bool]]]) -> tuple[float, str, float]:
    """The longest time an address the client got went on not answering: (seconds from
    its first failing fetch to its last in a row, plus one sampling period; the address;
    when the streak began). A streak ends at an answer or when the name drops it."""
    since: dict[str, float] = {}
    worst = (0.0, "", 0.0)
    for when, got in samples:
        for address in set(since) - set(got):
            del since[address]
        for address, answered in got.items():
            if answered:
                since.pop(address, None)
                continue
            began = since.setdefault(address, when)
            worst = max(worst, (when - began + EVERY, address, began))
    return worst


def test_clients_of_the_set_name_follow_an_image_rollout_within_ttl_and_one_run(
    rig: Rig, bind: Bind
) -> None:
    lab, daemon, remote = rig.lab, rig.daemon, rig.remote
    old_ips = {p: rig.proxies()[p]["ip"] for p in PROXIES}
    rig.wait(
        "the names published",
        lambda: bind.dig(SET_NAME, "A") == sorted(old_ips.values()),
        timeout=3 * INTERVAL + 120,
    )
    for p in PROXIES:
        assert bind.dig(p, "A") == [old_ips[p]], (p, bind.dig(p, "A"))
    before = vms(lab, PREFIX)
    assert len(before) == len(PROXIES), before
    source = imagebuild.cached(lab_config.IMAGES_DIR)
    assert source is not None and str(source.path) == lab["image"]["path"], lab["image"]
    copy = imageupdate.recompressed(source)
    new_url = lab["imageServer"].rstrip("/") + "/" + copy.path.name

    def rolled() -> bool:
        halted = rig.condition("RolloutHalted")
        assert halted is None, halted_report(lab, halted)
        found = vms(lab, PREFIX)
        new = [of_proxy(found, p, PREFIX) for p in PROXIES]
        if any(len(d) != 1 or d[0] in before for d in new):
            return False
        proxies = rig.proxies()
        return rig.all_healthy() and all(
            proxies[p]["domain"] == d[0] for p, d in zip(PROXIES, new, strict=True)
        )

    new_ips: dict[str, str] = {}

    def names_moved() -> bool:
        new_ips.update({p: rig.proxies()[p]["ip"] for p in PROXIES})
        return all(bind.dig(p, "A") == [new_ips[p]] for p in PROXIES) and bind.dig(
            SET_NAME, "A"
        ) == sorted(new_ips.values())

    with Client(BIND_PORT, lab["probeUrl"]) as client:
        rig.wait("the client to get the set", lambda: bool(client.resolved), timeout=60)
        committed = time.time()
        remote.push(
            f"debian12: a new image ({copy.sha256[:12]}), three at once beside the old",
            {
                "fleet.yaml": fleet_yaml(
                    lab, image=(new_url, copy.sha256), rollout=ROLLOUT, fleet=FLEET
                )
            },
        )
        assert daemon.hook() == 202
        rig.wait("every proxy on a new VM", rolled, timeout=2 * REPLACE_TIMEOUT + 300, step=5)
        rolled_at = time.time()
        rig.wait("the names on the new VMs", names_moved, timeout=3 * INTERVAL + 120)
        time.sleep(TTL + 2 * EVERY)  # the client's cached answer expires and is asked again
    samples = client.samples()
    dark, address, began = longest_dark([s for s in samples if s[0] >= committed])
    during = [got for when, got in samples if when >= committed]
    print(
        f"rollout: {rolled_at - committed:.0f} s from commit to every proxy on a new VM; "
        f"{len(during)} resolutions, {sum(len(g) for g in during)} fetches; longest "
        f"non-answering streak {dark:.0f} s"
        + (f" ({address} from {time.strftime('%H:%M:%S', time.gmtime(began))})" if address else "")
        + f"; bound {TTL + INTERVAL + EVERY:.0f} s"
    )
    assert len(during) >= 60, during
    assert set(during[-1]) == set(new_ips.values()) and all(during[-1].values()), during[-1]
    assert set(new_ips.values()).isdisjoint(old_ips.values()), (old_ips, new_ips)
    assert dark <= TTL + INTERVAL + EVERY, [
        (time.strftime("%H:%M:%S", time.gmtime(when)), got)
        for when, got in samples
        if address in got
    ]
    for p in PROXIES:
        assert bind.dig(p, "A") == [new_ips[p]], (p, old_ips[p], new_ips[p])
        assert bind.dig(p, "TXT") == [f'"heritage=proxyfleet,fleet={FLEET}"']
    assert bind.dig(SET_NAME, "A") == sorted(new_ips.values())
