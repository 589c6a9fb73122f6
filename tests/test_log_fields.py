"""Structured log fields: run id, revision, host and proxy as JSON keys, not only in msg."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest
from test_executor import create, one_host_run

from reconciler.cli.logsetup import JsonFormatter, LogfmtFormatter, TerminalFormatter, formatter
from reconciler.errors import PermanentError
from reconciler.logfields import FieldsFilter, bind, fields, start_run


@pytest.fixture
def json_lines() -> Iterator[io.StringIO]:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    handler.addFilter(FieldsFilter())
    root = logging.getLogger()
    root.addHandler(handler)
    level = root.level
    root.setLevel(logging.INFO)
    try:
        yield stream
    finally:
        root.removeHandler(handler)
        root.setLevel(level)


def lines(stream: io.StringIO) -> list[dict[str, str]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_an_actions_log_lines_carry_its_host_proxy_revision_and_run_as_json_keys(
    json_lines: io.StringIO,
) -> None:
    run, host = one_host_run("a", "b")
    host.fail("create", PermanentError("disk full"), target="pf-home-a-dddddddd")
    with fields(run="7", revision="1c6b26c0a1b2"):
        run.execute(create("a"), create("b"))

    by_proxy = {line.get("proxy"): line for line in lines(json_lines)}
    failed, succeeded = by_proxy["a"], by_proxy["b"]
    assert failed["level"] == "warning" and "disk full" in failed["msg"]
    for line in (failed, succeeded):
        assert line["host"] == "kvm01"
        assert (line["run"], line["revision"]) == ("7", "1c6b26c0a1b2")


def test_a_new_run_drops_the_fields_the_last_one_bound(json_lines: io.StringIO) -> None:
    with fields():
        start_run("1")
        bind(revision="aaaa")
        start_run("2")
        logging.getLogger("reconciler.test").info("next run")
    (line,) = lines(json_lines)
    assert line["run"] == "2" and "revision" not in line


def test_logfmt_carries_the_fields_as_keys_and_a_terminal_gets_plain_lines() -> None:
    record = logging.LogRecord("reconciler.x", logging.WARNING, "f", 1, "Create failed", (), None)
    record.pf_fields = {"host": "kvm01", "proxy": "web 1"}
    assert LogfmtFormatter().format(record).endswith('msg="Create failed" host=kvm01 proxy="web 1"')
    plain = TerminalFormatter().format(record)
    assert plain.endswith("warning Create failed  [host=kvm01 proxy=web 1]")
    assert "time=" not in plain
    assert isinstance(formatter("logfmt", terminal=True), TerminalFormatter)
    assert isinstance(formatter("json", terminal=True), JsonFormatter)
    assert isinstance(formatter("logfmt", terminal=False), LogfmtFormatter)
