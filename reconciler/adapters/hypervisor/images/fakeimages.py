"""``FakeImages``: the image cache's fake for the engine's unit tests (and nothing else).

It stands where ``ImageCache`` (reconciler.adapters.hypervisor.images.download) stands:
``fetch`` hands out a ``CachedImage`` without downloading anything: the path the cache
would give it (named by its URL, in a cache dir that does not exist), the checksum the
manifest pins (else a fixed one), and ``size`` says every image weighs ``IMAGE_BYTES``,
before and after a fetch. Failure injection: ``failures`` are raised by the next
fetches, in order. ``calls`` and ``sized`` record the image keys asked for. The contract
it shares with ``ImageCache``: tests/test_image_source_contract.py.
"""

from __future__ import annotations

import threading
from pathlib import Path

from reconciler.adapters.hypervisor.images.download import CachedImage, cache_name
from reconciler.model import Image

IMAGE_BYTES = 345 * 2**20
"""What every fake image weighs: an operator's cloud image."""

CHECKSUM = "ab" * 32
"""The sha256 every fetched fake image has when its manifest pins none."""
CACHE = Path("/cache")
"""The fake cache's directory (it does not exist)."""


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
        sha256 = (image.sha256 or CHECKSUM).strip().lower()
        return CachedImage(CACHE / cache_name(image), sha256, IMAGE_BYTES)

    def size(self, image: Image) -> int | None:
        with self._lock:
            self.sized.append(image.key)
        return IMAGE_BYTES
