"""The RFC 2136 publisher against a real BIND 9 (tests/bindserver.py): a dynamic zone on
127.0.0.1:19853 that takes UPDATE and AXFR signed with a ``tsig-keygen`` key.

Each test gets a fresh server. What the server holds is read back with ``dig``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from bindserver import KEY, ZONE, Bind, tsig_secret
from publishworld import World

from reconciler.adapters.dns.rfc2136 import Rfc2136Publisher
from reconciler.core.endpoints.records import Member
from reconciler.core.status.statusdoc import build, dump_yaml, run_entry
from reconciler.model.report import DnsResult, Health, RunResult
from reconciler.model.settings import DnsPolicy

PORT = 19853
FLEET = "demo"
REGISTRY = '"heritage=proxyfleet,fleet=demo"'


@pytest.fixture
def bind(tmp_path: Path) -> Iterator[Bind]:
    server = Bind(tmp_path / "bind", PORT)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def healthy(proxy: str, address: str, *, zone: str = "a", proxy_set: str = "web") -> Member:
    return Member(proxy, zone=zone, proxy_set=proxy_set, address=address, health=Health.HEALTHY)


def test_a_fleets_names_are_created_with_their_registry_records(bind: Bind) -> None:
    publisher = Rfc2136Publisher(bind.settings())
    fleet = [healthy("web-0", "192.0.2.10"), healthy("web-1", "192.0.2.11", zone="b")]

    outcome = publisher.publish(FLEET, fleet)

    assert outcome.result is DnsResult.PUBLISHED, outcome
    assert (outcome.changes, outcome.records, outcome.conflicts) == (5, 5, ())
    assert bind.dig("web-0", "A") == ["192.0.2.10"]
    assert bind.dig("web-1", "A") == ["192.0.2.11"]
    assert bind.dig("web.set", "A") == ["192.0.2.10", "192.0.2.11"]
    assert bind.dig("a.zone", "A") == ["192.0.2.10"]
    assert bind.dig("b.zone", "A") == ["192.0.2.11"]
    for name in ("web-0", "web-1", "web.set", "a.zone", "b.zone"):
        assert bind.dig(name, "TXT") == [REGISTRY]
    assert publisher.publish(FLEET, fleet).result is DnsResult.UNCHANGED


def test_an_ipv6_proxy_gets_an_aaaa_record(bind: Bind) -> None:
    publisher = Rfc2136Publisher(bind.settings())

    publisher.publish(FLEET, [healthy("web-0", "2001:db8::10")])

    assert bind.dig("web-0", "AAAA") == ["2001:db8::10"]
    assert bind.dig("web-0", "A") == []


def test_a_replace_moves_the_proxy_name_only_once_the_new_vm_is_healthy(bind: Bind) -> None:
    publisher = Rfc2136Publisher(bind.settings())
    publisher.publish(FLEET, [healthy("web-0", "192.0.2.10"), healthy("web-1", "192.0.2.11")])

    booting = Member(
        "web-0", zone="a", proxy_set="web", address="192.0.2.30", health=Health.UNHEALTHY
    )
    during = publisher.publish(FLEET, [booting, healthy("web-1", "192.0.2.11")])

    assert during.result is DnsResult.PUBLISHED
    assert bind.dig("web-0", "A") == ["192.0.2.10"]  # the old VM still serves
    assert bind.dig("web.set", "A") == ["192.0.2.11"]

    publisher.publish(FLEET, [healthy("web-0", "192.0.2.30"), healthy("web-1", "192.0.2.11")])

    assert bind.dig("web-0", "A") == ["192.0.2.30"]
    assert bind.dig("web.set", "A") == ["192.0.2.11", "192.0.2.30"]
    assert bind.dig("a.zone", "A") == ["192.0.2.11", "192.0.2.30"]


def test_a_deleted_proxys_names_are_removed_under_sync(bind: Bind) -> None:
    publisher = Rfc2136Publisher(bind.settings())
    publisher.publish(
        FLEET,
        [healthy("web-0", "192.0.2.10"), healthy("old-0", "192.0.2.99", zone="b", proxy_set="")],
    )

    outcome = publisher.publish(FLEET, [healthy("web-0", "192.0.2.10")])

    assert (outcome.result, outcome.changes, outcome.records) == (DnsResult.PUBLISHED, 2, 3)
    assert bind.dig("old-0", "A") == []
    assert bind.dig("old-0", "TXT") == []
    assert bind.dig("b.zone", "A") == []
    assert bind.dig("a.zone", "A") == ["192.0.2.10"]


def test_upsert_only_leaves_a_deleted_proxys_name(bind: Bind) -> None:
    publisher = Rfc2136Publisher(bind.settings(policy=DnsPolicy.UPSERT_ONLY))
    publisher.publish(FLEET, [healthy("web-0", "192.0.2.10"), healthy("web-1", "192.0.2.11")])

    outcome = publisher.publish(FLEET, [healthy("web-0", "192.0.2.10")])

    assert outcome.result is DnsResult.PUBLISHED  # web.set and a.zone lose web-1
    assert bind.dig("web-1", "A") == ["192.0.2.11"]
    assert bind.dig("web.set", "A") == ["192.0.2.10"]


def test_a_name_someone_else_holds_is_left_alone_and_reported(
    bind: Bind, caplog: pytest.LogCaptureFixture
) -> None:
    bind.nsupdate(
        f"update add web-0.{ZONE} 300 A 198.51.100.1",
        f"update add web-1.{ZONE} 300 A 198.51.100.2",
        f'update add web-1.{ZONE} 300 TXT "heritage=proxyfleet,fleet=other"',
    )
    publisher = Rfc2136Publisher(bind.settings())

    with caplog.at_level(logging.WARNING):
        outcome = publisher.publish(
            FLEET, [healthy("web-0", "192.0.2.10"), healthy("web-1", "192.0.2.11")]
        )

    assert outcome.result is DnsResult.PUBLISHED
    assert len(outcome.conflicts) == 2
    assert "web-0 holds A records without this fleet's TXT" in outcome.conflicts[0]
    assert "web-1 belongs to fleet other" in outcome.conflicts[1]
    assert "web-0" in caplog.text and "web-1" in caplog.text
    assert bind.dig("web-0", "A") == ["198.51.100.1"]
    assert bind.dig("web-0", "TXT") == []
    assert bind.dig("web-1", "A") == ["198.51.100.2"]
    assert bind.dig("web-1", "TXT") == ['"heritage=proxyfleet,fleet=other"']
    assert bind.dig("web.set", "A") == ["192.0.2.10", "192.0.2.11"]

    after = publisher.publish(FLEET, [])  # sync never deletes what is not ours

    assert bind.dig("web-0", "A") == ["198.51.100.1"]
    assert bind.dig("web-1", "A") == ["198.51.100.2"]
    assert bind.dig("web.set", "A") == []
    assert after.records == 0


@pytest.mark.parametrize(
    ("key", "rcode"), [("proxyfleet", "NOTAUTH (BADSIG)"), ("stranger", "NOTAUTH (BADKEY)")]
)
def test_a_wrong_tsig_key_is_reported_with_the_rcode_and_changes_nothing(
    bind: Bind, tmp_path: Path, caplog: pytest.LogCaptureFixture, key: str, rcode: str
) -> None:
    Rfc2136Publisher(bind.settings()).publish(FLEET, [healthy("web-0", "192.0.2.10")])
    wrong = tmp_path / "wrong.secret"
    canary = tsig_secret(key)
    wrong.write_text(canary)
    publisher = Rfc2136Publisher(bind.settings(secret_file=wrong, key=key))

    with caplog.at_level(logging.DEBUG):
        outcome = publisher.publish(FLEET, [healthy("web-0", "192.0.2.77")])

    assert outcome.result is DnsResult.FAILED
    assert outcome.rcode == rcode
    assert bind.dig("web-0", "A") == ["192.0.2.10"]
    for secret in (canary, bind.secret):
        assert secret not in caplog.text
        assert secret not in repr(outcome)
        assert secret not in repr(publisher.settings)


def test_a_server_that_is_down_then_up_again_converges(bind: Bind) -> None:
    publisher = Rfc2136Publisher(bind.settings())
    fleet = [healthy("web-0", "192.0.2.10")]
    bind.stop()

    down = publisher.publish(FLEET, fleet)

    assert down.result is DnsResult.FAILED
    assert "unreachable" in down.error
    bind.start()

    up = publisher.publish(FLEET, fleet)

    assert up.result is DnsResult.PUBLISHED
    assert bind.dig("web-0", "A") == ["192.0.2.10"]


def test_an_edit_between_reading_and_writing_fails_the_update_instead_of_being_lost(
    bind: Bind, monkeypatch: pytest.MonkeyPatch
) -> None:
    publisher = Rfc2136Publisher(bind.settings())
    publisher.publish(FLEET, [healthy("web-0", "192.0.2.10")])
    read = publisher._read

    def read_then_edit(key: Any) -> Any:
        present = read(key)
        bind.nsupdate(f"update add web-0.{ZONE} 60 A 192.0.2.55")
        return present

    monkeypatch.setattr(publisher, "_read", read_then_edit)

    outcome = publisher.publish(FLEET, [healthy("web-0", "192.0.2.20")])

    assert (outcome.result, outcome.rcode) == (DnsResult.FAILED, "NXRRSET")
    assert bind.dig("web-0", "A") == ["192.0.2.10", "192.0.2.55"]


def test_the_daemons_engine_publishes_into_bind_and_its_secret_stays_out_of_log_and_status(
    bind: Bind, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    world = World(tmp_path / "repo", Rfc2136Publisher(bind.settings()))
    (tmp_path / "repo").mkdir()
    world.write("web-1", "web-2")

    with caplog.at_level(logging.DEBUG):
        published = world.cycle()
        bind.secret_file.write_text(tsig_secret(KEY))  # rotated on the box, not on the server
        refused = world.cycle()

    assert bind.dig("web-1", "A") == [world.ip(published, "web-1")]
    assert bind.dig("a.zone", "A") == sorted(
        [world.ip(published, "web-1"), world.ip(published, "web-2")]
    )
    condition = next(c for c in refused.conditions if c.type == "DnsPublished")
    assert (condition.status, condition.reason) == (False, "ServerRefused")
    assert "NOTAUTH (BADSIG)" in condition.message
    assert refused.result is RunResult.SUCCESS
    canary = bind.secret_file.read_text().strip()
    status = dump_yaml(build(refused, None, runs=[run_entry(refused)]))
    assert "DnsPublished" in status
    for secret in (canary, bind.secret):
        assert secret not in status
        assert secret not in caplog.text


def test_deleting_a_name_removes_only_the_fleets_records_and_keeps_a_note_beside_them(
    bind: Bind,
) -> None:
    publisher = Rfc2136Publisher(bind.settings())
    publisher.publish(FLEET, [healthy("web-0", "192.0.2.10", proxy_set="")])
    bind.nsupdate(f'update add web-0.{ZONE} 300 TXT "owner: team-net" "ticket 42"')

    outcome = publisher.publish(FLEET, [])

    assert outcome.result is DnsResult.PUBLISHED
    assert bind.dig("web-0", "A") == []
    assert bind.dig("web-0", "TXT") == ['"owner: team-net" "ticket 42"']


def test_a_zone_that_refuses_the_transfer_is_reported_with_the_rcode(tmp_path: Path) -> None:
    server = Bind(tmp_path / "bind", PORT, transfer=False)
    server.start()
    try:
        outcome = Rfc2136Publisher(server.settings()).publish(
            FLEET, [healthy("web-0", "192.0.2.10")]
        )
        published = server.dig("web-0", "A")
    finally:
        server.stop()

    assert (outcome.result, outcome.reason, outcome.rcode) == (
        DnsResult.FAILED,
        "ServerRefused",
        "REFUSED",
    )
    assert "zone transfer" in outcome.error
    assert published == []
