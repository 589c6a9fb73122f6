"""The RFC 2136 publisher's failures that happen before a byte is sent: the box's key.
A canary secret shows that no message names it. (Against a real server:
tests/integration/test_dns_bind.py.)"""

from __future__ import annotations

import logging
import threading
from pathlib import Path

import pytest

from reconciler.adapters.dns.rfc2136 import Rfc2136Publisher
from reconciler.adapters.hypervisor.fakehost import FakeHypervisor
from reconciler.adapters.hypervisor.images.fakeimages import FakeImages
from reconciler.adapters.surface.metrics import Metrics
from reconciler.adapters.surface.probe import FakeProber
from reconciler.cli.compose import daemon_engine
from reconciler.core.status.conditions import dns_published
from reconciler.model.report import DnsResult, Health, Member
from reconciler.model.settings import DaemonSettings, DnsSettings, TsigSettings

CANARY = "canary-s3cret-not-base64!!"
FLEET = [Member("web-0", zone="a", address="192.0.2.10", health=Health.HEALTHY)]


def settings(secret_file: Path | None) -> DnsSettings:
    # Port 9 on loopback: nothing is sent there, the key fails first.
    return DnsSettings(
        server="127.0.0.1:9",
        zone="proxies.example.org.",
        tsig=TsigSettings(name="proxyfleet", secret_file=secret_file),
        timeout=1.0,
    )


@pytest.mark.parametrize("case", ["not base64", "missing file", "no file named"])
def test_an_unusable_key_is_a_failed_publish_that_names_no_secret(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, case: str
) -> None:
    secret = tmp_path / "dns.secret"
    if case == "not base64":
        secret.write_text(CANARY)
    publisher = Rfc2136Publisher(settings(None if case == "no file named" else secret))

    with caplog.at_level(logging.DEBUG):
        outcome = publisher.publish("home", FLEET)

    condition = dns_published(outcome)
    assert (outcome.result, outcome.reason) == (DnsResult.FAILED, "KeyUnusable")
    assert (condition.status, condition.reason) == (False, "KeyUnusable")
    for text in (repr(outcome), condition.message, caplog.text, repr(publisher.settings)):
        assert CANARY not in text


def test_the_daemon_publishes_only_with_a_dns_config(tmp_path: Path) -> None:
    def build(dns: DnsSettings | None) -> object:
        engine = daemon_engine(
            DaemonSettings(state_dir=tmp_path, dns=dns),
            Metrics().observe_rpc,
            threading.Event(),
            held=lambda: True,
            hosts=lambda host: FakeHypervisor(host.name),
            images=FakeImages(),
            prober=FakeProber(),
        )
        return engine.endpoints

    assert build(None) is None
    publisher = build(settings(tmp_path / "dns.secret"))
    assert isinstance(publisher, Rfc2136Publisher)
    assert publisher.settings.zone == "proxies.example.org."
