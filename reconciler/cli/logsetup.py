"""Log output: logfmt (default, for journald) or JSON lines; plain lines on a terminal.

Each line carries the structured fields of reconciler.logfields (``run``,
``revision``, ``host``, ``proxy``) as keys of its own where the code set them.
On a terminal (stderr a tty) logfmt is shown as ``HH:MM:SS level message
[host=… proxy=…]`` instead: the same content, for a person. JSON stays JSON.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Mapping
from datetime import UTC, datetime

from reconciler.logfields import ATTRIBUTE, FieldsFilter

LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
}


def _quote(value: str) -> str:
    if value and not any(c in value for c in ' "=\n\t'):
        return value
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


class LogfmtFormatter(logging.Formatter):
    """``time=… level=info logger=… msg="…"`` (plus ``error=…`` with a traceback)."""

    def format(self, record: logging.LogRecord) -> str:
        fields = {
            "time": datetime.fromtimestamp(record.created, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
            **structured(record),
        }
        if record.exc_info:
            fields["error"] = self.formatException(record.exc_info)
        return " ".join(f"{k}={_quote(v)}" for k, v in fields.items())


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        fields = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
            **structured(record),
        }
        if record.exc_info:
            fields["error"] = self.formatException(record.exc_info)
        return json.dumps(fields, ensure_ascii=False)


class TerminalFormatter(logging.Formatter):
    """``14:02:03 warning Create of pf-home-web-1-… failed: …  [host=hv1 proxy=web-1]``:
    local time, for a person at a terminal."""

    def format(self, record: logging.LogRecord) -> str:
        stamp = datetime.fromtimestamp(record.created).strftime("%H:%M:%S")
        extra = " ".join(f"{k}={v}" for k, v in structured(record).items())
        line = f"{stamp} {record.levelname.lower():7} {record.getMessage()}"
        line = f"{line}  [{extra}]" if extra else line
        if record.exc_info:
            line = f"{line}\n{self.formatException(record.exc_info)}"
        return line


def structured(record: logging.LogRecord) -> dict[str, str]:
    """The record's fields (``FieldsFilter``), as strings."""
    found = getattr(record, ATTRIBUTE, None)
    return {k: str(v) for k, v in found.items()} if isinstance(found, Mapping) else {}


def formatter(fmt: str, *, terminal: bool) -> logging.Formatter:
    """JSON for ``json``; else logfmt, or plain lines when ``terminal``."""
    if fmt == "json":
        return JsonFormatter()
    return TerminalFormatter() if terminal else LogfmtFormatter()


def setup_logging(level: str, fmt: str, *, verbose: int = 0) -> None:
    """Send every proxyfleet log line to stderr (journald under systemd)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(formatter(fmt, terminal=sys.stderr.isatty()))
    handler.addFilter(FieldsFilter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.DEBUG if verbose else LEVELS.get(level, logging.INFO))
    for noisy in ("paramiko", "git", "watchfiles"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
