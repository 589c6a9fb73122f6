"""An idle fleet's domains read the same in every cycle: the observe hands back the domain it
built before (hostobserve._domain) when the stats it reads and the owner are unchanged, and
a new one as soon as any of them changes. A running guest's vCPU times, which change in every
cycle, do not count."""

from __future__ import annotations

from typing import Any

from reconciler.adapters.hypervisor.observe.hostobserve import observe_host
from reconciler.adapters.hypervisor.transport.ownerwatch import OwnerCache
from reconciler.core.render.metadata import owner_xml
from reconciler.model import Domain, DomainState, Host
from tests.test_observe_turns import NETWORK, RUNNING, Dom, Images, Session, owner

HOST = Host(name="h1", address="h1.test", zone="z", network=NETWORK)


def observed(session: Session) -> dict[str, Domain]:
    inventory = observe_host(session, Images(), HOST)  # type: ignore[arg-type]
    return {d.name: d for d in inventory.domains}


def session_with(stats: dict[str, dict[str, Any]], texts: dict[str, str | None]) -> Session:
    """A host whose domains answer ``stats`` and whose owners are already known."""
    doms = [Dom(name, texts[name] or "") for name in stats]
    known = OwnerCache()
    for dom in doms:
        known.put(dom.UUIDString(), known.begin(), texts[dom.name()])
    return Session(doms, known, stats)


def test_an_unchanged_domain_is_the_same_object_in_the_next_cycle() -> None:
    stats = {"pf-a": dict(RUNNING), "pf-b": {"state.state": 5, "state.reason": 0}}
    session = session_with(stats, {"pf-a": owner_xml(owner("a")), "pf-b": None})
    first, second = observed(session), observed(session)
    assert second["pf-a"] is first["pf-a"]
    assert second["pf-b"] is first["pf-b"]
    assert first["pf-a"].owner == owner("a")
    assert first["pf-b"].owner is None
    assert first["pf-b"].state is DomainState.SHUTOFF


def test_a_running_guests_vcpu_times_do_not_make_a_new_domain() -> None:
    stats = {"pf-a": {**RUNNING, "vcpu.0.time": 1000}}
    session = session_with(stats, {"pf-a": owner_xml(owner("a"))})
    first = observed(session)["pf-a"]
    stats["pf-a"]["vcpu.0.time"] = 2000
    assert observed(session)["pf-a"] is first


def test_a_changed_state_size_or_owner_gives_the_new_values() -> None:
    text = owner_xml(owner("a"))
    stats = {"pf-a": dict(RUNNING)}
    session = session_with(stats, {"pf-a": text})
    first = observed(session)["pf-a"]
    assert (first.state, first.vcpus, first.memory_mib) == (DomainState.RUNNING, 1, 1024)

    stats["pf-a"] = {**RUNNING, "balloon.current": 512 << 10, "vcpu.current": 2}
    resized = observed(session)["pf-a"]
    assert (resized.vcpus, resized.memory_mib) == (2, 512)

    stats["pf-a"] = {"state.state": 5, "state.reason": 3}  # shut off, crashed
    crashed = observed(session)["pf-a"]
    assert (crashed.state, crashed.reason) == (DomainState.SHUTOFF, "crashed")

    changed = session_with({"pf-a": dict(RUNNING)}, {"pf-a": owner_xml(owner("b"))})
    assert observed(changed)["pf-a"].owner == owner("b")
    assert observed(session)["pf-a"].owner == owner("a")
