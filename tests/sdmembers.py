"""Two proxies of ProxySet ``web`` as a run leaves them (one healthy, one not): what the
/sd/proxies tests serve. Tests that need reachable or other addresses ``replace`` them."""

from __future__ import annotations

from reconciler.model.report import Health, Member

WEB0 = Member(
    "web-0",
    zone="a",
    proxy_set="web",
    address="192.0.2.10",
    health=Health.HEALTHY,
    host="kvm01",
    port=3128,
)
WEB1 = Member(
    "web-1",
    zone="b",
    proxy_set="web",
    address="2001:db8::11",
    health=Health.UNHEALTHY,
    host="kvm02",
    port=8080,
)
