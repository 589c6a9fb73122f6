"""Where what earlier runs saw is kept between runs: ``<state dir>/history.json``.

The history of each VM (probe failing since, healthy since, restarts) and a halted
rollout must survive a daemon restart, or a crash loop would restart a VM for
ever and a halted rollout would start again after every restart. They are
facts about this box's runs, not desired state, so they live in the state dir
beside the image cache, not in the fleet repo (whose committers must not be
able to forge them) nor on the hosts (which would cost a mutating call per
probe). A second management box starts with an empty history: it counts
again from zero, which only ever delays a replace, never adds one.

The file is written whole to a temporary file and renamed over the old one;
it is never read through a symlink, and one that does not parse counts as
empty (logged), never as an error that stops a run.
"""

from __future__ import annotations

import logging
import threading
from datetime import datetime
from pathlib import Path
from typing import Any

from reconciler.adapters.state import jsonfile
from reconciler.model.history import Halt, History, VmRecord
from reconciler.model.plan import DomainRef

log = logging.getLogger(__name__)

VERSION = 1
MAX_BYTES = 8 * 1024 * 1024
"""A history file larger than this is not read (a fleet of thousands stays far below)."""


class MemoryHistoryStore:
    """Keeps the history in this process only: for tests, and a one-off ``apply``
    without a state dir.

    What it keeps goes through the file's encoding, so a run reads back what it would
    read from ``history.json`` (times to the second), as tests/test_history_store_contract.py
    checks against ``FileHistoryStore``.
    """

    def __init__(self, history: History | None = None) -> None:
        self._document = encode(history or History())
        self._lock = threading.Lock()

    def load(self) -> History:
        with self._lock:
            return decode(self._document)

    def save(self, history: History) -> None:
        document = encode(history)
        with self._lock:
            self._document = document


class FileHistoryStore:
    """``history.json`` in the state dir."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def load(self) -> History:
        try:
            document = jsonfile.read(self.path, max_bytes=MAX_BYTES)
        except jsonfile.TooLarge:
            log.warning("History %s is larger than %d bytes; ignored.", self.path, MAX_BYTES)
            return History()
        except OSError as exc:
            log.warning("History %s not read (%s); starting without it.", self.path, exc)
            return History()
        except ValueError as exc:
            log.warning("History %s does not parse (%s); starting without it.", self.path, exc)
            return History()
        if document is None:
            return History()
        try:
            return decode(document)
        except (ValueError, KeyError, TypeError) as exc:
            log.warning("History %s does not parse (%s); starting without it.", self.path, exc)
            return History()

    def save(self, history: History) -> None:
        jsonfile.write(self.path, encode(history))


def encode(history: History) -> dict[str, Any]:
    vms = [
        {
            "host": ref.host,
            "domain": ref.domain,
            "failingSince": _time(record.failing_since),
            "healthyOnce": record.healthy_once,
            "restarts": [_time(t) for t in record.restarts],
            "healthySince": _time(record.healthy_since),
            "suspectAt": _time(record.suspect_at),
        }
        for ref, record in history.vms
    ]
    halts = [
        {
            "revision": halt.revision,
            "proxy": halt.proxy,
            "domain": halt.domain,
            "reason": halt.reason,
            "since": _time(halt.since),
        }
        for halt in history.halts
    ]
    return {"version": VERSION, "vms": vms, "halts": halts}


def decode(document: Any) -> History:
    if not isinstance(document, dict) or document.get("version") != VERSION:
        raise ValueError("not a version 1 history document")
    vms = []
    for entry in document.get("vms") or []:
        failing = entry.get("failingSince")
        healthy = entry.get("healthySince")
        suspect = entry.get("suspectAt")
        vms.append(
            (
                DomainRef(str(entry["host"]), str(entry["domain"])),
                VmRecord(
                    failing_since=datetime.fromisoformat(failing) if failing else None,
                    healthy_once=bool(entry.get("healthyOnce", False)),
                    restarts=tuple(datetime.fromisoformat(t) for t in entry.get("restarts", [])),
                    healthy_since=datetime.fromisoformat(healthy) if healthy else None,
                    suspect_at=datetime.fromisoformat(suspect) if suspect else None,
                ),
            )
        )
    # "halt": one halt, as files written before halts were a set hold it.
    raw = document.get("halts") or ([document["halt"]] if document.get("halt") else [])
    halts = tuple(
        Halt(
            revision=str(entry["revision"]),
            proxy=str(entry["proxy"]),
            domain=str(entry["domain"]),
            reason=str(entry["reason"]),
            since=datetime.fromisoformat(entry["since"]),
        )
        for entry in raw
    )
    return History(vms=tuple(vms), halts=halts)


def _time(value: datetime | None) -> str | None:
    return value.isoformat(timespec="seconds") if value is not None else None
