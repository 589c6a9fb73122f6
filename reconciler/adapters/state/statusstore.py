"""What this box last committed to the status branch: ``<state dir>/status/last-status.json``.

The status branch takes pushes from anyone who can push to the repo, so what the
daemon commits is derived from its own runs and this file, never from what it
reads on the branch: a pusher's fake proxy entry, run or ``since`` time is not
carried into the daemon's next commit. The branch is read for two things only:
its tip (the parent of the next commit, so the push is a fast-forward) and the
blob id of its status.yaml, compared with the one kept here to tell whether the
branch still shows this box's last status.

A missing or unreadable file counts as "nothing committed yet" (logged): the next
publish commits the box's own picture, ``since`` times starting now.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reconciler.adapters.state import jsonfile
from reconciler.core.status import statusdoc

log = logging.getLogger(__name__)

VERSION = 1
MAX_BYTES = 64 * 1024 * 1024
"""A file larger than this is not read (3,000 proxies take about 1 MB)."""


@dataclass(frozen=True, slots=True)
class LastStatus:
    """The document last committed, and the blob id its status.yaml got."""

    doc: statusdoc.Doc
    blob: str


class StatusStore:
    """``last-status.json``: one LastStatus, replaced whole on every commit."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def load(self) -> LastStatus | None:
        try:
            document: Any = jsonfile.read(self.path, max_bytes=MAX_BYTES)
        except (OSError, ValueError) as exc:
            log.warning("Last status %s not read (%s); the next one starts afresh.", self.path, exc)
            return None
        if document is None:
            return None
        if not isinstance(document, dict) or document.get("version") != VERSION:
            log.warning("Last status %s is not ours; the next one starts afresh.", self.path)
            return None
        doc, blob = document.get("doc"), document.get("blob")
        if not isinstance(blob, str) or not isinstance(doc, dict) or not statusdoc.well_formed(doc):
            log.warning("Last status %s is malformed; the next one starts afresh.", self.path)
            return None
        return LastStatus(doc=doc, blob=blob)

    def save(self, last: LastStatus) -> None:
        """Raises OSError when the state dir cannot be written."""
        jsonfile.write(self.path, {"version": VERSION, "blob": last.blob, "doc": last.doc})
