"""``python tests/lockdaemon.py CONFIG.json``: the real daemon (``proxyfleet run``'s ``serve``)
with its real fleet lock and git source, on in-memory hypervisors, as a process of its own.

The subject of the tests that start it is the lock: every mutating call that gets past the
fence is appended to the shared ``log`` as ``<unix time> <box> <method> <target>``, so that
a test can tell who acted when; ``createSeconds`` makes each create take that long (a
create in flight to be killed). CONFIG keys: box, repoUrl, stateDir, coordinationUrl
("" for the file lock), ttl, port, log, createSeconds; for several fleets, ``fleets``
(a list of {fleet, repoUrl}) instead of repoUrl, and ``member`` (the ring member name);
the log's target is then ``<host>:<target>`` so that each line names its fleet's host.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from reconciler.adapters.coordination.toozlock import ToozLocks, default_url
from reconciler.adapters.hypervisor.fakecalls import MUTATING
from reconciler.adapters.hypervisor.fakehost import Call, FakeHypervisor
from reconciler.adapters.hypervisor.images.fakeimages import FakeImages
from reconciler.adapters.surface.probe import FakeProber
from reconciler.cli.serve import serve
from reconciler.model import Host
from reconciler.model.coordination import Holder
from reconciler.model.settings import (
    CoordinationSettings,
    DaemonSettings,
    FleetSettings,
    ListenSettings,
    RepoSettings,
)
from reconciler.ports.hypervisor import Hypervisor


def main(config_file: Path) -> int:
    config = json.loads(config_file.read_text())
    box = str(config["box"])
    logging.basicConfig(
        level=logging.INFO, format=f"%(asctime)s {box} %(name)s %(levelname)s %(message)s"
    )
    log_path = Path(config["log"])
    create_seconds = float(config.get("createSeconds", 0))
    several = "fleets" in config
    hosts: dict[str, FakeHypervisor] = {}
    numbers = itertools.count(10)

    def record(call: Call, host: str) -> None:
        if call.method in MUTATING:
            target = f"{host}:{call.target}" if several else call.target
            line = f"{time.time():.3f} {box} {call.method} {target}\n"
            fd = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, line.encode())
            finally:
                os.close(fd)
        if call.method == "create":
            time.sleep(create_seconds)

    def factory(host: Host) -> Hypervisor:
        if host.name not in hosts:
            fake = FakeHypervisor(host.name)

            def on_call(call: Call, fake: FakeHypervisor = fake) -> None:
                record(call, fake.name)
                if call.method == "create" and call.target not in fake.addresses_of:
                    fake.addresses_of[call.target] = (f"198.51.100.{next(numbers)}",)

            fake.on_call = on_call
            hosts[host.name] = fake
        return hosts[host.name]

    state = Path(config["stateDir"])
    ttl = float(config.get("ttl", 20))
    settings = DaemonSettings(
        repo=RepoSettings(url=str(config.get("repoUrl", ""))),
        interval=3600,
        listen=ListenSettings("127.0.0.1", int(config["port"])),
        coordination=CoordinationSettings(
            url=str(config.get("coordinationUrl", "")),
            ttl=ttl,
            member=str(config.get("member", "")),
        ),
        state_dir=state,
        fleets=tuple(
            FleetSettings(fleet=str(f["fleet"]), repo=RepoSettings(url=str(f["repoUrl"])))
            for f in config.get("fleets", ())
        ),
    )
    locks = ToozLocks(
        settings.coordination.url or default_url(state),
        me=Holder(box, os.getpid(), "daemon"),
        ttl=ttl,
    )
    return serve(settings, locks, host_factory=factory, images=FakeImages(), prober=FakeProber())


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
