"""The daemon end to end over a real git remote (file:// and through a real sshd):
a pushed commit plus a signed webhook creates the VM (on an in-memory
hypervisor), the status branch gains a commit saying so, the metrics show it,
and an idle cycle adds no commit.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from daemonutil import http, real_daemon, running, wait_until
from enginefakes import FakeTime, fake_host
from gitutil import Remote, git, make_remote
from hostservices import Sshd, make_keys

from reconciler.adapters.git.gitsource import GitSource
from reconciler.adapters.git.statuswriter import GitStatusWriter
from reconciler.adapters.hypervisor.fakehost import FakeHypervisor
from reconciler.adapters.hypervisor.images.fakeimages import FakeImages
from reconciler.adapters.surface.httpapi import sign
from reconciler.adapters.surface.metrics import Metrics
from reconciler.adapters.surface.probe import FakeProber
from reconciler.cli import compose
from reconciler.engine.daemon import Daemon, ObservedSource, source_cycle
from reconciler.engine.reconcile import Engine
from reconciler.model import Host
from reconciler.model.settings import (
    DaemonSettings,
    ListenSettings,
    RepoSettings,
    WebhookSettings,
)

STATUS = "proxyfleet-status"
SECRET = b"hook-secret"

FLEET = """\
apiVersion: proxyfleet/v1
kind: Fleet
metadata:
  name: home
spec:
  images:
    debian-12:
      url: https://images.example.test/debian-12.qcow2
      sha256: abababababababababababababababababababababababababababababababab
  machineTypes:
    small: {vcpus: 1, memoryMiB: 512, diskGiB: 4}
  hosts:
    - name: kvm01
      address: kvm01.example.test
      zone: a
      network: {bridge: br0}
  policy:
    prune: true
    allowEmpty: true
"""

PROXY = """\
apiVersion: proxyfleet/v1
kind: Proxy
metadata:
  name: web-1
spec:
  placement: {zone: a, image: debian-12, machineType: small}
  cloudInit:
    userData: |
      #cloud-config
      hostname: web-1
"""


@dataclass
class Rig:
    remote: Remote
    daemon: Daemon
    host: FakeHypervisor
    engine: Engine
    stop: threading.Event = field(default_factory=threading.Event)

    def hook(self) -> int:
        body = b'{"ref": "refs/heads/main"}'
        return http(
            self.daemon, "/hook", body=body, headers={"X-Hub-Signature-256": sign(SECRET, body)}
        )[0]

    def status_commits(self) -> list[str]:
        return self.remote.branch_log(STATUS)


def build(remote: Remote, url: str, tmp_path: Path, repo: RepoSettings) -> Rig:
    (tmp_path / "secret").write_bytes(SECRET)
    settings = DaemonSettings(
        repo=repo,
        interval=3600,
        listen=ListenSettings("127.0.0.1", 0),
        webhook=WebhookSettings(secret_file=tmp_path / "secret"),
        state_dir=tmp_path / "state",
    )
    host = fake_host("kvm01")
    stop = threading.Event()

    def factory(h: Host) -> FakeHypervisor:
        return host

    engine = compose.engine(
        factory, images=FakeImages(), prober=FakeProber(), runtime=FakeTime().runtime(stop)
    )
    metrics = Metrics()
    source = ObservedSource(GitSource(repo, settings.state_dir / "repo"), metrics.source_result)
    daemon = real_daemon(
        settings,
        source_cycle(source, lambda root, rev: engine.reconcile_once(root, revision=rev)),
        metrics=metrics,
        status=GitStatusWriter(repo, settings.status, settings.state_dir / "status"),
        stop=stop,
        handle_signals=False,
    )
    return Rig(remote, daemon, host, engine, stop)


def scenario(rig: Rig) -> None:
    with running(rig.daemon) as daemon:
        assert wait_until(lambda: len(daemon.reports) == 1, timeout=30)
        first = daemon.reports[0]
        assert first.revision == git(rig.remote.bare, "rev-parse", "main"), first.problems
        assert len(rig.status_commits()) == 1

        revision = rig.remote.commit({"proxies/web-1.yaml": PROXY}, "Add web-1")
        assert rig.hook() == 202
        assert wait_until(lambda: len(daemon.reports) == 2, timeout=30)
        second = daemon.reports[1]
        assert second.revision == revision
        assert [d for d in rig.host.domains if d.startswith("pf-home-web-1-")], second
        assert len(rig.status_commits()) == 2
        message = git(rig.remote.bare, "log", "-1", "--format=%B", STATUS)
        assert f"applied revision {revision[:12]}" in message
        assert "- proxy web-1 running on kvm01, healthy" in message
        status_md = rig.remote.show(STATUS, ".proxyfleet/STATUS.md")
        assert "| web-1 | a | kvm01 | running |" in status_md
        metrics = http(daemon, "/metrics")[1].decode()
        assert 'proxyfleet_proxies{state="running",zone="a"} 1.0' in metrics
        assert f'proxyfleet_source_revision_info{{revision="{revision}"}} 1.0' in metrics
        assert 'proxyfleet_applied_actions_total{kind="create",result="succeeded"} 1.0' in metrics
        assert "proxyfleet_source_up 1.0" in metrics

        daemon.triggers.fire("SIGHUP")  # an idle cycle: same revision, same world
        assert wait_until(lambda: len(daemon.reports) == 3, timeout=30)
        assert daemon.reports[2].revision == revision
        assert len(rig.status_commits()) == 2
    rig.engine.close()


def test_a_pushed_commit_and_a_webhook_create_the_vm_over_file_url(tmp_path: Path) -> None:
    remote = make_remote(tmp_path)
    remote.commit({"fleet.yaml": FLEET}, "A real fleet")
    repo = RepoSettings(url=remote.url)
    scenario(build(remote, remote.url, tmp_path, repo))


@pytest.fixture
def git_sshd(tmp_path: Path) -> Iterator[tuple[Sshd, Path, Path]]:
    keys = make_keys(tmp_path / "ssh")
    server = Sshd(keys, name="git")
    server.start()
    server.keyscan(keys.known_hosts)
    yield server, keys.client_key, keys.known_hosts
    server.stop()


def test_a_pushed_commit_and_a_webhook_create_the_vm_over_ssh(
    tmp_path: Path, git_sshd: tuple[Sshd, Path, Path]
) -> None:
    server, key, known_hosts = git_sshd
    remote = make_remote(tmp_path)
    remote.commit({"fleet.yaml": FLEET}, "A real fleet")
    url = f"ssh://root@127.0.0.1:{server.port}{remote.bare}"
    repo = RepoSettings(url=url, ssh_key_file=key, known_hosts_file=known_hosts)
    scenario(build(remote, url, tmp_path, repo))
    assert "Accepted publickey for root" in server.log.read_text()
