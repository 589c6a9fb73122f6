"""One contract, two image sources: the same cases against ``FakeImages`` and ``ImageCache``.

``FakeImages`` stands in for the image cache in the engine's unit tests, so what it
hands out for an image (where the copy lies, its checksum, its size before and after the
fetch) must agree as ``ImageCache``'s answers agree. Each case runs against both: the
cache downloads ``file://`` images from an allow-listed directory in a temporary
directory (real files, real sha256) into a cache directory of its own.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Protocol

import pytest

from reconciler.adapters.hypervisor.images.download import CachedImage, ImageCache
from reconciler.adapters.hypervisor.images.fakeimages import FakeImages
from reconciler.model import Image


class Side(Protocol):
    def image(self, name: str, *, pinned: bool = True) -> Image:
        """An image the source can fetch, its sha256 in the manifest when ``pinned``."""

    def fetch(self, image: Image) -> CachedImage: ...

    def size(self, image: Image) -> int | None: ...


class FakeSide(FakeImages):
    def image(self, name: str, *, pinned: bool = True) -> Image:
        sha = hashlib.sha256(name.encode()).hexdigest() if pinned else None
        return Image(key=name, url=f"file:///images/{name}.qcow2", sha256=sha)


class CacheSide(ImageCache):
    def __init__(self, tmp: Path) -> None:
        self.images = tmp / "images"
        self.images.mkdir()
        super().__init__(tmp / "cache", allowed_file_dirs=[self.images])

    def image(self, name: str, *, pinned: bool = True) -> Image:
        body = f"QFI\xfb {name} ".encode() * 1000
        path = self.images / f"{name}.qcow2"
        path.write_bytes(body)
        sha = hashlib.sha256(body).hexdigest() if pinned else None
        return Image(key=name, url=path.as_uri(), sha256=sha)


@pytest.fixture(params=["fake", "cache"])
def side(request: pytest.FixtureRequest, tmp_path: Path) -> Side:
    return FakeSide() if request.param == "fake" else CacheSide(tmp_path)


def test_contract_an_image_is_fetched_to_one_place_named_by_its_url(side: Side) -> None:
    debian, alma = side.image("debian"), side.image("alma")

    first, again, other = side.fetch(debian), side.fetch(debian), side.fetch(alma)

    assert first.path == again.path != other.path
    assert first.path.parent == other.path.parent  # one cache
    assert first.path.suffix == ".qcow2"


def test_contract_a_pinned_image_is_handed_out_with_the_checksum_its_manifest_pins(
    side: Side,
) -> None:
    image = side.image("debian")
    shouted = Image(key="debian", url=image.url, sha256=(image.sha256 or "").upper())

    assert side.fetch(image).sha256 == image.sha256
    assert side.fetch(shouted).sha256 == image.sha256  # lower-case hex, as computed


def test_contract_an_unpinned_image_is_handed_out_with_a_sha256_all_the_same(
    side: Side,
) -> None:
    fetched = side.fetch(side.image("debian", pinned=False))

    assert len(fetched.sha256) == 64 and set(fetched.sha256) <= set("0123456789abcdef")


def test_contract_an_image_s_size_is_known_before_the_fetch_and_is_what_was_fetched(
    side: Side,
) -> None:
    image = side.image("debian")

    before = side.size(image)
    fetched = side.fetch(image)

    assert before is not None and before > 0
    assert before == fetched.size == side.size(image)
