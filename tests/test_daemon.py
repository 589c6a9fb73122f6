from __future__ import annotations

import shutil
import subprocess
import threading
from pathlib import Path

import pytest
from daemonutil import FakeCycle, http, real_daemon, running, wait_until

from reconciler.adapters.git.statuswriter import MemoryStatusSink
from reconciler.adapters.surface.httpapi import sign, signature_valid
from reconciler.engine.daemon import Daemon
from reconciler.model.report import RunResult
from reconciler.model.settings import DaemonSettings, ListenSettings, WebhookSettings

SECRET = b"s3cret-hook-key"


@pytest.fixture
def settings(tmp_path: Path) -> DaemonSettings:
    secret = tmp_path / "webhook-secret"
    secret.write_bytes(SECRET + b"\n")
    return DaemonSettings(
        interval=3600,
        listen=ListenSettings("127.0.0.1", 0),
        webhook=WebhookSettings(secret_file=secret),
        state_dir=tmp_path / "state",
    )


def make(settings: DaemonSettings, cycle: FakeCycle, **kw: object) -> Daemon:
    return real_daemon(settings, cycle, **kw)  # type: ignore[arg-type]


def test_the_daemon_reconciles_once_at_start(settings: DaemonSettings) -> None:
    cycle = FakeCycle()
    with running(make(settings, cycle)):
        assert wait_until(lambda: cycle.calls == 1)


def test_a_hook_with_a_bad_signature_is_401_and_runs_nothing(settings: DaemonSettings) -> None:
    cycle = FakeCycle()
    with running(make(settings, cycle)) as daemon:
        assert wait_until(lambda: cycle.calls == 1 and not cycle.running.is_set())
        body = b'{"ref": "refs/heads/main"}'
        bad = {"X-Hub-Signature-256": sign(b"wrong secret", body)}
        assert http(daemon, "/hook", body=body, headers=bad)[0] == 401
        assert http(daemon, "/hook", body=body)[0] == 401
        assert (
            http(daemon, "/hook", body=body, headers={"X-Hub-Signature-256": "sha256="})[0] == 401
        )
        assert not wait_until(lambda: cycle.calls > 1, timeout=0.5)
        assert not daemon.triggers.pending
        good = {"X-Hub-Signature-256": sign(SECRET, body)}
        assert http(daemon, "/hook", body=body, headers=good)[0] == 202
        assert wait_until(lambda: cycle.calls == 2)


def test_without_a_webhook_secret_the_hook_does_not_exist(settings: DaemonSettings) -> None:
    from dataclasses import replace

    cycle = FakeCycle()
    with running(make(replace(settings, webhook=WebhookSettings()), cycle)) as daemon:
        body = b"{}"
        assert (
            http(daemon, "/hook", body=body, headers={"X-Hub-Signature-256": sign(b"", body)})[0]
            == 404
        )


def test_signatures_are_checked_over_the_exact_body() -> None:
    body = b'{"after": "abc"}'
    assert signature_valid(SECRET, body, sign(SECRET, body))
    assert signature_valid(SECRET, body, sign(SECRET, body).upper().replace("SHA256=", "sha256="))
    assert not signature_valid(SECRET, body + b" ", sign(SECRET, body))
    assert not signature_valid(SECRET, body, None)
    assert not signature_valid(b"", body, sign(b"", body))


def test_triggers_during_a_run_add_exactly_one_more_run(settings: DaemonSettings) -> None:
    cycle = FakeCycle(hold=True)
    with running(make(settings, cycle)) as daemon:
        assert wait_until(cycle.running.is_set)
        body = b"{}"
        headers = {"X-Hub-Signature-256": sign(SECRET, body)}
        for _ in range(3):
            assert http(daemon, "/hook", body=body, headers=headers)[0] == 202
        daemon.triggers.fire("SIGHUP")
        daemon.triggers.fire("commit")
        cycle.release.set()
        assert wait_until(lambda: cycle.calls == 2 and not cycle.running.is_set())
        assert not wait_until(lambda: cycle.calls > 2, timeout=1.0)
    assert cycle.calls == 2


def test_without_triggers_the_interval_runs_the_cycle_again(settings: DaemonSettings) -> None:
    from dataclasses import replace

    cycle = FakeCycle()
    with running(make(replace(settings, interval=0.3, jitter=0.0), cycle)):
        assert wait_until(lambda: cycle.calls >= 3, timeout=5)


def test_healthz_turns_503_when_the_last_cycle_is_three_intervals_old(
    settings: DaemonSettings,
) -> None:
    now = [100.0]
    cycle = FakeCycle()
    with running(make(settings, cycle, monotonic=lambda: now[0])) as daemon:
        assert wait_until(lambda: cycle.calls == 1 and not cycle.running.is_set())
        assert wait_until(lambda: daemon.reports != [])
        status, text = http(daemon, "/healthz")
        assert status == 200, text
        now[0] += 3 * settings.interval - 1
        assert http(daemon, "/healthz")[0] == 200
        now[0] += 2
        status, text = http(daemon, "/healthz")
        assert status == 503 and text.startswith(b"stale: last cycle completed")


def test_a_cycle_that_raises_becomes_a_failed_run_and_the_loop_goes_on(
    settings: DaemonSettings,
) -> None:
    cycle = FakeCycle()
    cycle.error = RuntimeError("boom")
    sink = MemoryStatusSink()
    with running(make(settings, cycle, status=sink)) as daemon:
        assert wait_until(lambda: len(daemon.reports) == 1)
        assert daemon.reports[0].result == RunResult.FAILED
        assert daemon.reports[0].problems == ("RuntimeError: boom",)
        cycle.error = None
        daemon.triggers.fire("SIGHUP")
        assert wait_until(lambda: len(daemon.reports) == 2)
        assert daemon.reports[1].result == RunResult.SUCCESS
    assert "Ready is False (RunFailed)" in sink.messages[0]


def test_stop_during_a_run_lets_it_finish_and_starts_no_other(settings: DaemonSettings) -> None:
    cycle = FakeCycle(hold=True)
    daemon = make(settings, cycle)
    thread = threading.Thread(target=daemon.run)
    thread.start()
    assert wait_until(cycle.running.is_set)
    daemon.stop.set()
    daemon.triggers.fire("stop")
    daemon.triggers.fire("SIGHUP")
    cycle.release.set()
    thread.join(5)
    assert not thread.is_alive()
    assert cycle.calls == 1
    assert len(daemon.reports) == 1


def test_metrics_are_served_and_pass_promtool(settings: DaemonSettings, tmp_path: Path) -> None:
    promtool = shutil.which("promtool")
    assert promtool, "promtool is missing: the Makefile installs the Debian package prometheus"
    cycle = FakeCycle()
    with running(make(settings, cycle)) as daemon:
        assert wait_until(lambda: len(daemon.reports) == 1)
        daemon.metrics.observe_rpc("virDomainCreateXML", "kvm-a", 0.25, False)
        status, body = http(daemon, "/metrics")
    assert status == 200
    text = body.decode()
    assert 'proxyfleet_reconcile_runs_total{result="success"} 1.0' in text
    assert (
        'proxyfleet_proxy_health{health="healthy",host="kvm-a",proxy="web-1",zone="east"} 1.0'
        in text
    )
    assert 'proxyfleet_libvirt_rpc_errors_total{host="kvm-a",rpc="virDomainCreateXML"} 1.0' in text
    (tmp_path / "metrics.txt").write_text(text)
    checked = subprocess.run(
        [promtool, "check", "metrics"], input=text, capture_output=True, text=True, check=False
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_a_refused_head_stalls_the_cycle_and_a_failed_fetch_is_listed_as_a_problem(
    tmp_path: Path,
) -> None:
    from reports import report

    from reconciler.adapters.git.fakesource import FakeSource
    from reconciler.engine.daemon import ObservedSource, source_cycle

    seen: list[bool] = []
    fake = FakeSource(tmp_path, revision="a" * 40, error="head aaaa refused by verifyCommits")
    source = ObservedSource(fake, lambda *, ok: seen.append(ok))
    calls: list[tuple[Path, str]] = []

    def reconcile(root: Path, revision: str) -> object:
        calls.append((root, revision))
        return report(revision=revision)

    cycle = source_cycle(source, reconcile)  # type: ignore[arg-type]
    stalled = cycle(threading.Event())
    assert stalled.result == RunResult.STALLED and calls == []
    assert stalled.revision == "a" * 40
    stalled_condition = next(c for c in stalled.conditions if c.type == "Stalled")
    assert (stalled_condition.status, stalled_condition.reason) == (True, "SourceRefused")
    fake.error = ""
    cycle(threading.Event())
    fake.fetch_error = "fetching origin failed: timeout"
    kept = cycle(threading.Event())
    assert calls == [(tmp_path, "a" * 40)] * 2
    assert kept.problems[0] == "fetching origin failed: timeout"
    assert seen == [False, True, False]
    fake.fetch_error = ""
    cycle(threading.Event())
    assert seen == [False, True, False, True]


def test_a_refused_head_after_an_accepted_one_keeps_reconciling_the_accepted_revision(
    tmp_path: Path,
) -> None:
    from reports import report

    from reconciler.adapters.git.fakesource import FakeSource
    from reconciler.adapters.surface.metrics import Metrics
    from reconciler.engine.daemon import source_cycle

    fake = FakeSource(tmp_path, revision="a" * 40)
    calls: list[tuple[Path, str]] = []

    def reconcile(root: Path, revision: str) -> object:
        calls.append((root, revision))
        return report(revision=revision)

    cycle = source_cycle(fake, reconcile)  # type: ignore[arg-type]
    cycle(threading.Event())
    fake.revision, fake.error = "b" * 40, "head bbbb does not descend from the last revision aaaa"

    kept = cycle(threading.Event())

    assert calls == [(tmp_path, "a" * 40)] * 2  # healing, probes and status go on
    assert (kept.revision, kept.refused) == ("a" * 40, "b" * 40)
    assert kept.problems[0] == "head bbbb does not descend from the last revision aaaa"
    conditions = {c.type: c for c in kept.conditions}
    assert (conditions["Stalled"].status, conditions["Stalled"].reason) == (True, "SourceRefused")
    assert "the last accepted revision aaaaaaaaaaaa is applied" in conditions["Stalled"].message
    assert (conditions["Ready"].status, conditions["Ready"].reason) == (False, "SourceRefused")
    metrics = Metrics()
    metrics.record(kept)
    text = metrics.exposition().decode()
    assert f'proxyfleet_source_revision_info{{revision="{"a" * 40}"}} 1.0' in text
    assert f'proxyfleet_source_refused_info{{revision="{"b" * 40}"}} 1.0' in text
    fake.revision, fake.error = "c" * 40, ""
    metrics.record(cycle(threading.Event()))
    assert "proxyfleet_source_refused_info{" not in metrics.exposition().decode()


def test_hung_after_seconds_decides_when_a_cycle_is_hung_once_three_intervals_are_shorter(
    settings: DaemonSettings,
) -> None:
    from dataclasses import replace

    now = [0.0]
    daemon = make(
        replace(settings, interval=3, hung_after=10), FakeCycle(), monotonic=lambda: now[0]
    )
    daemon._cycle_started = 0.0
    now[0] = 9.5
    assert daemon.alive()
    now[0] = 10.5
    assert not daemon.alive()


def test_a_long_cycle_that_keeps_finishing_actions_is_alive_and_one_that_stops_is_hung(
    settings: DaemonSettings,
) -> None:
    from reconciler.engine.runtime import Heartbeat

    now = [0.0]
    hung = max(3 * settings.interval, settings.hung_after)
    heartbeat = Heartbeat(monotonic=lambda: now[0])
    daemon = make(settings, FakeCycle(), monotonic=lambda: now[0], heartbeat=heartbeat)
    daemon.http.start()
    try:
        daemon._cycle_started = 10.0  # a cycle (a long rollout) started at t=10
        now[0] = 10.0 + hung + 1
        assert not daemon.alive()

        heartbeat.touch()  # a replace of its next batch finished
        assert daemon.alive()

        now[0] += hung + 1  # and then nothing more
        assert not daemon.alive()
    finally:
        daemon.http.stop()
