"""The image seam: base images in the local cache, and their sizes before planning.

Real: ``ImageCache`` (reconciler.adapters.hypervisor.images.download), downloads checked
against their sha256. Fake: ``FakeImages``
(reconciler.adapters.hypervisor.images.fakeimages), which downloads nothing. Contract:
tests/test_image_source_contract.py (the fake and ``ImageCache`` over ``file://`` images).
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from reconciler.model import Image


class FetchedImage(Protocol):
    """A base image in the local cache, its checksum verified while downloading."""

    @property
    def path(self) -> Path: ...

    @property
    def sha256(self) -> str: ...


class ImageSizes(Protocol):
    """Where image sizes come from: the local image cache (``ImageCache.size``)."""

    def size(self, image: Image) -> int | None:
        """Bytes of ``image`` without downloading it; None when not known. Cost: a stat
        when cached, else one HEAD request (or a stat of a ``file://`` image)."""


class ImageSource(ImageSizes, Protocol):
    """The local image cache: ``fetch`` for the executor, ``size`` before planning
    (reconciler.engine.observe)."""

    def fetch(self, image: Image) -> FetchedImage: ...
