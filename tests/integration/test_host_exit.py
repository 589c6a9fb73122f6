"""A process that exits without closing its host adapter exits all the same."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

from hostservices import SshKeys

from reconciler.model import Host

CHILD = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path
    from reconciler.adapters.hypervisor.libvirthost import LibvirtHost
    from reconciler.model import DomainType, Host, HostNetwork
    from reconciler.model.settings import SshSettings

    args = json.loads(sys.argv[1])
    host = Host(
        name="it1", address="127.0.0.1", port=args["port"], zone="z1",
        network=HostNetwork("network", args["network"]), pool=args["pool"],
        domain_type=DomainType.QEMU, cpu_mode="none",
    )
    ssh = SshSettings(
        key_file=Path(args["key"]), known_hosts_file=Path(args["known_hosts"]),
        connect_timeout=10.0, call_timeout=30.0, keepalive_interval=5.0,
    )
    adapter = LibvirtHost(host, ssh)
    print(len(adapter.observe().domains), flush=True)
    raise SystemExit(7)  # leaves without adapter.close()
    """
)


def test_a_process_that_never_closes_its_host_still_exits(host: Host, ssh_keys: SshKeys) -> None:
    args = {
        "port": host.port,
        "network": host.network.name,
        "pool": host.pool,
        "key": str(ssh_keys.client_key),
        "known_hosts": str(ssh_keys.known_hosts),
    }
    done = subprocess.run(
        [sys.executable, "-c", CHILD, json.dumps(args)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    assert done.returncode == 7, done.stderr[-2000:]
    assert done.stdout.strip().isdigit(), done.stdout
