"""The daemon's hosts keep owners between cycles; one-shot commands' hosts read every owner
(reconciler.adapters.hypervisor.transport.ownerwatch; the events themselves:
tests/integration/test_host_owner_watch.py)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from reconciler.adapters.surface.metrics import Metrics
from reconciler.cli import build_parser, compose
from reconciler.engine.runtime import Runtime
from reconciler.model.settings import DaemonSettings, SshSettings


def recording_factory(seen: list[dict[str, Any]]) -> Any:
    def factory(ssh: SshSettings, **kwargs: Any) -> Any:
        seen.append(kwargs)
        return lambda host: None

    return factory


def test_the_daemon_builds_hosts_that_watch_and_apply_builds_hosts_that_do_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    daemon: list[dict[str, Any]] = []
    monkeypatch.setattr(compose, "host_factory", recording_factory(daemon))
    settings = DaemonSettings(state_dir=tmp_path / "daemon")
    engine = compose.daemon_engine(
        settings, Metrics().observe_rpc, threading.Event(), held=lambda: True
    )
    engine.close()
    one_shot: list[dict[str, Any]] = []
    monkeypatch.setattr(compose, "host_factory", recording_factory(one_shot))
    args = build_parser().parse_args(["apply", "--state-dir", str(tmp_path / "apply")])
    compose.apply_engine(args, DaemonSettings(), runtime=Runtime.interruptible()).close()

    assert [kwargs.get("watch") for kwargs in daemon] == [True]
    assert [kwargs.get("watch", False) for kwargs in one_shot] == [False]
