"""Global flags before or after the command, and help text without RST markup."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from reconciler.cli import build_parser, main
from reconciler.cli.globalflags import say, subparsers

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "fleet-repo"


def test_verbose_is_accepted_after_the_subcommand_as_docs_hosts_shows() -> None:
    parser = build_parser()
    assert parser.parse_args(["inventory", "-v"]).verbose == 1
    assert parser.parse_args(["inventory", "-vv"]).verbose == 2
    assert parser.parse_args(["-v", "inventory"]).verbose == 1
    assert parser.parse_args(["hosts", "check", "-v"]).verbose == 1
    assert parser.parse_args(["inventory"]).verbose == 0


def test_quiet_and_no_color_are_accepted_before_or_after_the_subcommand() -> None:
    parser = build_parser()
    for argv in (["-q", "--no-color", "plan"], ["plan", "--quiet", "--no-color"]):
        args = parser.parse_args(argv)
        assert args.quiet and args.no_color, argv
    assert not parser.parse_args(["plan"]).quiet


def test_quiet_drops_progress_lines_and_warnings_but_keeps_errors(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[str] = []

    def command(_args: object) -> int:
        say("waiting for something")
        logging.getLogger("reconciler.test").warning("a warning")
        logging.getLogger("reconciler.test").error("an error")
        seen.append(os.environ.get("NO_COLOR", ""))
        return 0

    handler = _Collect()
    logging.getLogger().addHandler(handler)
    parser = build_parser()
    monkeypatch.setattr("reconciler.cli.build_parser", lambda: parser)
    for sub in subparsers(parser):
        sub.set_defaults(func=command)
    try:
        assert main(["validate", "-q", "--no-color", str(EXAMPLE)]) == 0
    finally:
        logging.getLogger().removeHandler(handler)
    assert "waiting" not in capsys.readouterr().err
    assert handler.messages == ["an error"]
    assert seen == ["1"]
    assert logging.root.manager.disable == logging.NOTSET


def test_no_help_text_shows_rst_markup() -> None:
    parser = build_parser()
    pending = [parser]
    while pending:
        one = pending.pop()
        assert "``" not in one.format_help(), one.prog
        pending.extend(subparsers(one))


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())
