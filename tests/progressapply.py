"""``python tests/progressapply.py DIR``: ``proxyfleet apply --yes`` over in-memory hosts with a
real image download (a 24 MiB ``file://`` image through the real ImageCache), so that a test
can run it with stdout on a pipe or on a pty and look at how progress is shown."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from enginefakes import FleetRepo

from reconciler.adapters.hypervisor.images.download import CachedImage, ImageCache
from reconciler.cli import apply, applyengine, build_parser
from reconciler.cli.logsetup import setup_logging
from reconciler.cli.progress import show_progress_lines
from reconciler.model import Image


class LocalImages:
    """Every image key is fetched from one local file, through the real cache."""

    def __init__(self, cache: ImageCache, source: Path) -> None:
        self._cache = cache
        self._source = source

    def fetch(self, image: Image) -> CachedImage:
        return self._cache.fetch(Image(key=image.key, url=self._source.as_uri()))


def main(work: Path) -> int:
    source = work / "images" / "disk.qcow2"
    source.parent.mkdir(parents=True, exist_ok=True)
    source.write_bytes(b"\0" * (24 << 20))
    root = work / "repo"
    root.mkdir(parents=True, exist_ok=True)
    world = FleetRepo(root)
    world.engine.images = LocalImages(
        ImageCache(
            work / "cache",
            allowed_file_dirs=(source.parent,),
            progress_interval=applyengine.BAR_INTERVAL,
            chunk_size=1 << 20,
        ),
        source,
    )
    setup_logging("warning", "logfmt")
    show_progress_lines()
    args = build_parser().parse_args(["apply", "--repo", str(world.root), "--yes"])
    return apply.apply_with(args, world.engine)


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
