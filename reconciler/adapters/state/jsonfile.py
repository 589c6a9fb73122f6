"""A JSON file of the state dir, read and written the one careful way.

Read: never through a symbolic link (``O_NOFOLLOW``), never more than a stated size.
Written: whole, to a temporary file beside it (mode 0600), synced, then renamed over
the old one, so a crash leaves the old file or the new one, never half of either.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


class TooLarge(ValueError):
    """The file holds more than the caller allows."""


def read(path: Path, *, max_bytes: int) -> Any | None:
    """The file's document, or None when there is no file. Raises OSError when it cannot be
    read (a link included), TooLarge past ``max_bytes``, ValueError when it is not JSON."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    with os.fdopen(fd, "rb") as fh:
        raw = fh.read(max_bytes + 1)
    if len(raw) > max_bytes:
        raise TooLarge(f"larger than {max_bytes} bytes")
    return json.loads(raw)


def write(path: Path, document: Any) -> None:
    """Replace the file with ``document``. Raises OSError when the state dir cannot be written."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    data = json.dumps(document, indent=1, sort_keys=True).encode()
    fd = os.open(
        temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600
    )
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(temporary, path)
