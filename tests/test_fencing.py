"""FencedHost: no mutating host call once the fleet lock is not ours; reads pass."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from enginefakes import FLEET, HOST, PROXY, FakeTime

from reconciler.adapters.coordination.fakelock import FakeLockBackend, FakeLocks
from reconciler.adapters.hypervisor.fakehost import Call, FakeHypervisor
from reconciler.adapters.hypervisor.images.fakeimages import FakeImages
from reconciler.adapters.surface.probe import FakeProber
from reconciler.cli import compose
from reconciler.engine.fencing import FencedHost, fenced
from reconciler.errors import FencedError, PermanentError
from reconciler.model import Image, ImageFormat, Owner
from reconciler.model.coordination import Holder
from reconciler.model.report import ActionResult
from reconciler.model.settings import ApplySettings

ME = Holder("box-a", 101, "daemon")


def write_repo(root: Path, *proxies: str) -> None:
    (root / "fleet.yaml").write_text(FLEET.replace("HOSTS\n", HOST.replace("NAME", "kvm01")))
    (root / "proxies.yaml").write_text("".join(PROXY.replace("NAME", p) for p in proxies))


def test_a_lost_lock_refuses_every_mutating_call_before_it_reaches_the_host() -> None:
    backend = FakeLockBackend()
    lock = FakeLocks(backend, ME).lock("home")
    assert lock.acquire()
    inner = FakeHypervisor("kvm01")
    host = FencedHost(inner, lock.held)
    image = Image(key="debian-12", url="https://x.test/d.qcow2", format=ImageFormat.QCOW2)

    backend.lose("home")
    calls: list[tuple[str, object]] = [
        ("ensure_image", lambda: host.ensure_image(image, Path("/cache/d"))),
        ("start", lambda: host.start("pf-home-a-00000000")),
        ("delete", lambda: host.delete("pf-home-a-00000000")),
        ("set_owner", lambda: host.set_owner("pf-home-a-00000000", owner())),
        ("remove_volumes", lambda: host.remove_volumes("pf-home-a-00000000", ())),
        ("remove_unused_base", lambda: host.remove_unused_base("base-debian-12.qcow2")),
    ]
    for rpc, call in calls:
        with pytest.raises(FencedError) as caught:
            call()  # type: ignore[operator]
        assert caught.value.rpc == rpc and caught.value.host == "kvm01"
        assert isinstance(caught.value, PermanentError)
    assert inner.calls == []
    assert host.observe().reachable
    assert [c.method for c in inner.calls] == ["observe"]


def owner() -> Owner:
    return Owner(
        fleet="home",
        proxy="a",
        digest="0" * 64,
        image_key="debian-12",
        image_sha256="",
        revision="",
        created="",
    )


def test_an_engine_whose_lock_is_lost_mid_run_makes_no_further_mutating_call(
    tmp_path: Path,
) -> None:
    write_repo(tmp_path, "a", "b", "c")
    backend = FakeLockBackend()
    lock = FakeLocks(backend, ME).lock("home")
    assert lock.acquire()
    inner = FakeHypervisor("kvm01")

    def lose_after_first_create(call: Call) -> None:
        if call.method == "create":
            backend.lose("home")

    inner.on_call = lose_after_first_create
    engine = compose.engine(
        fenced(lambda host: inner, lock.held),
        images=FakeImages(),
        prober=FakeProber(),
        settings=ApplySettings(per_host_concurrency=1),  # one create at a time: a clear "next"
        runtime=FakeTime().runtime(threading.Event()),
    )
    report = engine.reconcile_once(tmp_path, revision="r1")

    creates = [c for c in inner.mutations if c.method == "create"]
    assert len(creates) == 1
    failed = [o for o in report.outcomes if o.result is ActionResult.FAILED]
    assert len(failed) == 2
    assert all("no longer holds the fleet lock" in o.error for o in failed)
