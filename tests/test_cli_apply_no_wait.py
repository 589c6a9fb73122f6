"""``proxyfleet apply --no-wait``: new VMs are looked at once instead of waited for."""

from __future__ import annotations

from pathlib import Path

from reconciler.cli import build_parser, compose
from reconciler.engine.runtime import Runtime
from reconciler.model.settings import ApplySettings, DaemonSettings


def engine_settings(tmp_path: Path, *flags: str) -> ApplySettings:
    args = build_parser().parse_args(["apply", "--state-dir", str(tmp_path), *flags])
    engine = compose.apply_engine(args, DaemonSettings(), runtime=Runtime.interruptible())
    try:
        return engine.settings
    finally:
        engine.close()


def test_no_wait_checks_new_vms_once_and_keeps_every_other_setting(tmp_path: Path) -> None:
    waiting = engine_settings(tmp_path)
    once = engine_settings(tmp_path, "--no-wait")

    assert waiting.ip_wait_timeout == ApplySettings().ip_wait_timeout > 0
    assert once.ip_wait_timeout == 0
    assert once.replace_timeout == waiting.replace_timeout
    assert once.per_host_concurrency == waiting.per_host_concurrency
