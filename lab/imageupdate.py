"""A second lab image for image updates: the same guest, different bytes.

An image update is a new ``url`` and ``sha256`` for an image key, and the lab
needs one that a clean clone can make quickly without a second debootstrap:
``qemu-img convert`` of the cached image with its clusters compressed by zstd
instead of zlib. The guest is the same, the file's sha256 (and so its
content-named base volume) differs. Made once beside the image, in the image
directory the lab's image server serves, and reused after.

A module of its own, not part of imagebuild.py: the image cache is keyed by
imagebuild.py's bytes, and this copy is no part of the image's recipe.

Used by the rollout benchmark (benchmarks/bench_rollout.py) and the day-2 lab
test's image update (tests/lab/test_e2e_day2.py, scenario a).
"""

from __future__ import annotations

import fcntl
import hashlib
import subprocess
import time
from pathlib import Path

from lab.imagebuild import Image

ZSTD_CONVERT = ("qemu-img", "convert", "-c", "-o", "compression_type=zstd", "-O", "qcow2")


def recompressed(source: Image) -> Image:
    """The zstd copy of ``source``: ``<name>-zstd.qcow2`` beside it, with a ``.sha256`` file.

    Every lab instance shares the image directory: one conversion at a time, and a second
    caller finds the first one's result. Raises RuntimeError if the copy came out
    byte-identical (then there is no update to roll)."""
    target = source.path.with_name(f"{source.path.stem}-zstd{source.path.suffix}")
    sums = target.with_name(target.name + ".sha256")
    started = time.monotonic()
    built = False
    with open(source.path.parent / ".rollout-image.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (target.is_file() and sums.is_file()):
            tmp = target.with_name(target.name + ".tmp")
            subprocess.run([*ZSTD_CONVERT, str(source.path), str(tmp)], check=True)
            sha = _sha256(tmp)
            tmp.rename(target)
            sums.write_text(f"{sha}  {target.name}\n")
            built = True
    sha = sums.read_text().split()[0]
    if sha == source.sha256:
        raise RuntimeError(f"{target} is byte-identical to {source.path}: no update to roll")
    return Image(target, sha, source.key, built=built, seconds=time.monotonic() - started)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()
