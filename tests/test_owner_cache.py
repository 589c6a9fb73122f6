"""The daemon's owners kept between observes (reconciler.adapters.hypervisor.transport.ownerwatch):
a text is trusted from its read until an event names its domain, and a read that may
predate a change is never kept. The events themselves, from a real libvirtd, are
tests/integration/test_host_owner_watch.py's."""

from __future__ import annotations

import logging

import pytest

from reconciler.adapters.hypervisor.transport import ownerwatch
from reconciler.adapters.hypervisor.transport.ownerwatch import OwnerCache

TEXT = "<owner fleet='f' proxy='a'/>"


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Dom:
    def __init__(self, uuid: str) -> None:
        self.uuid = uuid

    def UUIDString(self) -> str:
        if not self.uuid:
            raise RuntimeError("no uuid")
        return self.uuid


def read(cache: OwnerCache, uuid: str, text: str | None) -> None:
    cache.put(uuid, cache.begin(), text)


def test_a_read_text_is_known_until_an_event_names_its_domain() -> None:
    cache = OwnerCache()
    assert cache.get("u1") == (False, None)
    read(cache, "u1", TEXT)
    read(cache, "u2", None)  # a foreign domain is known as foreign

    assert cache.get("u1") == (True, TEXT)
    assert cache.get("u2") == (True, None)
    cache._on_event(None, Dom("u1"), 0, 0, None)  # what libvirt's callback passes
    assert cache.get("u1") == (False, None)
    assert cache.get("u2") == (True, None)


def test_a_read_that_began_before_an_event_for_its_domain_is_not_kept() -> None:
    cache = OwnerCache()
    began = cache.begin()
    cache.changed("u1")  # the domain changed while the read was on the wire
    cache.put("u1", began, TEXT)
    assert cache.get("u1") == (False, None)

    began = cache.begin()
    cache.changed("u2")  # another domain's event does not spoil it
    cache.put("u1", began, TEXT)
    assert cache.get("u1") == (True, TEXT)


def test_a_text_older_than_its_age_limit_is_read_again() -> None:
    clock = Clock()
    cache = OwnerCache(clock=clock, max_age=600.0)
    read(cache, "u1", TEXT)
    clock.now += 600.0
    assert cache.get("u1") == (True, TEXT)
    clock.now += 0.5
    assert cache.get("u1") == (False, None)


def test_past_the_remembered_events_every_read_then_in_flight_is_dropped(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(ownerwatch, "CHANGES_KEPT", 3)
    cache = OwnerCache()
    began = cache.begin()
    for uuid in ("a", "b", "c", "d"):  # "u1"'s own event may be among those forgotten
        cache.changed(uuid)
    cache.put("u1", began, TEXT)
    assert cache.get("u1") == (False, None)
    read(cache, "u1", TEXT)  # a read begun after it is kept
    assert cache.get("u1") == (True, TEXT)


def test_an_event_that_cannot_be_applied_forgets_every_owner(
    caplog: pytest.LogCaptureFixture,
) -> None:
    cache = OwnerCache()
    read(cache, "u1", TEXT)
    read(cache, "u2", None)
    with caplog.at_level(logging.ERROR, logger="reconciler.host"):
        cache._on_event(None, Dom(""), "metadata", "ns", None)
    assert len(cache) == 0
    assert "forgetting every owner" in caplog.text


def test_stop_without_a_connection_does_nothing() -> None:
    cache = OwnerCache()
    cache.stop()
    assert cache.conn is None
