"""``FakeImages``: the image cache's fake for the engine's unit tests (and nothing else).

It stands where ``ImageCache`` (reconciler.adapters.hypervisor.images.download) stands:
``fetch`` hands out a ``CachedImage`` without downloading anything (a path in a cache
that does not exist, a fixed checksum) and ``size`` says every image weighs
``IMAGE_BYTES``. Failure injection: ``failures`` are raised by the next fetches, in
order. ``calls`` and ``sized`` record the image keys asked for.
"""

from __future__ import annotations

import threading
from pathlib import Path

from reconciler.adapters.hypervisor.images.download import CachedImage
from reconciler.model import Image

IMAGE_BYTES = 345 * 2**20
"""What every fake image weighs: an operator's cloud image."""

CHECKSUM = "ab" * 32
"""The sha256 every fetched fake image has."""


class FakeImages:
    def __init__(self, failures: list[Exception] | None = None) -> None:
        self.calls: list[str] = []
        self.sized: list[str] = []
        self.failures = list(failures or [])
        self._lock = threading.Lock()

    def fetch(self, image: Image) -> CachedImage:
        with self._lock:
            self.calls.append(image.key)
            if self.failures:
                raise self.failures.pop(0)
        return CachedImage(Path(f"/cache/{image.key}"), CHECKSUM, IMAGE_BYTES)

    def size(self, image: Image) -> int | None:
        with self._lock:
            self.sized.append(image.key)
        return IMAGE_BYTES
