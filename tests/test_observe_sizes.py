"""A running domain's vCPUs and memory (hand edits, a host's capacity) come from
``virDomainGetInfo``, which libvirtd answers from its own definition of the domain; the bulk
stats ask only the state group, which takes no domain job and never asks a QEMU. A domain
that is not running costs no call for its sizes."""

from __future__ import annotations

from typing import Any

import libvirt

from reconciler.adapters.hypervisor.observe.hostobserve import observe_host
from reconciler.adapters.hypervisor.transport.ownerwatch import OwnerCache
from reconciler.core.render.metadata import owner_xml
from reconciler.model import Domain, DomainState, Host
from tests.test_observe_turns import NETWORK, RUNNING, Dom, Images, Session, owner

HOST = Host(name="h1", address="h1.test", zone="z", network=NETWORK)
SHUT_OFF = {"state.state": 5, "state.reason": 1}
PAUSED = {"state.state": 3, "state.reason": 2, "vcpu.current": 2, "balloon.current": 2 << 20}


def host_with(stats: dict[str, dict[str, Any]], owners: OwnerCache | None = None) -> Session:
    """``owners``: the daemon's cache; None: apply's session, which reads every owner."""
    return Session([Dom(name, owner_xml(owner(name))) for name in stats], owners, stats)


def observed(session: Session) -> dict[str, Domain]:
    inventory = observe_host(session, Images(), HOST)  # type: ignore[arg-type]
    return {d.name: d for d in inventory.domains}


def test_the_bulk_stats_ask_only_the_state_group() -> None:
    session = host_with({"pf-a": dict(RUNNING)})
    observed(session)
    assert session.conn.groups == [libvirt.VIR_DOMAIN_STATS_STATE]


def test_a_running_domains_sizes_come_from_its_info_and_a_stopped_one_costs_no_call() -> None:
    running = {**RUNNING, "vcpu.current": 2, "balloon.current": 768 << 10}
    session = host_with({"pf-run": running, "pf-off": dict(SHUT_OFF), "pf-pause": PAUSED})

    found = observed(session)

    assert (found["pf-run"].vcpus, found["pf-run"].memory_mib) == (2, 768)
    assert (found["pf-off"].state, found["pf-off"].vcpus) == (DomainState.SHUTOFF, None)
    assert (found["pf-pause"].state, found["pf-pause"].vcpus) == (DomainState.PAUSED, None)
    assert session.conn.calls["info"] == 1
    assert session.conn.calls["metadata"] == 3


def test_a_lowered_maximum_memory_is_what_runs() -> None:
    shrunk = {**RUNNING, "balloon.current": 1 << 20, "balloon.maximum": 512 << 10}
    assert observed(host_with({"pf-a": shrunk}))["pf-a"].memory_mib == 512


def test_the_daemon_reads_no_owner_it_knows_but_reads_a_running_domains_sizes() -> None:
    stats = {"pf-run": dict(RUNNING), "pf-off": dict(SHUT_OFF)}
    known = OwnerCache()
    for name in stats:
        known.put(f"uuid-{name}", known.begin(), owner_xml(owner(name)))
    session = host_with(stats, known)

    first = observed(session)
    stats["pf-run"] = {**RUNNING, "vcpu.current": 4}  # setvcpus by hand
    second = observed(session)

    assert session.conn.calls["metadata"] == 0
    assert session.conn.calls["info"] == 2
    assert (first["pf-run"].vcpus, second["pf-run"].vcpus) == (1, 4)
    assert second["pf-run"].owner == owner("pf-run")
    assert second["pf-off"].owner == owner("pf-off")


def test_a_running_domain_gone_before_its_info_is_not_listed() -> None:
    session = host_with({"pf-gone": {**RUNNING, "gone": True}, "pf-a": dict(RUNNING)})
    assert list(observed(session)) == ["pf-a"]
