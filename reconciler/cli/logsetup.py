"""Log output for the daemon: logfmt (default, for journald) or JSON lines."""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime

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
        }
        if record.exc_info:
            fields["error"] = self.formatException(record.exc_info)
        return json.dumps(fields, ensure_ascii=False)


def setup_logging(level: str, fmt: str, *, verbose: int = 0) -> None:
    """Send every proxyfleet log line to stderr (journald under systemd)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else LogfmtFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.DEBUG if verbose else LEVELS.get(level, logging.INFO))
    for noisy in ("paramiko", "git", "watchfiles"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
