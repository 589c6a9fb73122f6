"""What the fleet lock adapters share: this process as a ``Holder``, and holders as the
coordination service stores them. The seam itself is reconciler.ports.locks.

``ToozLocks`` (reconciler.adapters.coordination.toozlock) and ``FakeLocks``
(reconciler.adapters.coordination.fakelock) use them.
"""

from __future__ import annotations

import os
import socket
from datetime import UTC, datetime
from typing import Any

from reconciler.model.coordination import Holder


def this_process(role: str) -> Holder:
    """The identity of the running process, not holding anything yet."""
    return Holder(socket.gethostname(), os.getpid(), role)


def utc_now() -> datetime:
    return datetime.now(UTC)


def holder_caps(holder: Holder) -> dict[str, Any]:
    """A holder as the coordination service stores it (tooz member capabilities)."""
    return {
        "box": holder.box,
        "pid": holder.pid,
        "role": holder.role,
        "since": holder.since.isoformat() if holder.since else "",
    }


def holder_from_caps(caps: object) -> Holder | None:
    """The holder stored by ``holder_caps``; None when the record is not one."""
    if not isinstance(caps, dict):
        return None
    try:
        since = datetime.fromisoformat(str(caps.get("since") or ""))
        return Holder(str(caps["box"]), int(caps["pid"]), str(caps.get("role", "?")), since)
    except (KeyError, TypeError, ValueError):
        return None


def holder_gone(holder: Holder) -> bool:
    """True for a member of this box whose process no longer runs (a file-backend leftover)."""
    if holder.box != socket.gethostname():
        return False
    try:
        os.kill(holder.pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False
