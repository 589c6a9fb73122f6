"""The local image cache against file:// and a real HTTP server on 127.0.0.1."""

from __future__ import annotations

import hashlib
import http.server
import logging
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from proxystub import serving

from reconciler.adapters.hypervisor.images.download import CachedImage, ImageCache
from reconciler.adapters.hypervisor.images.imageurls import check_url, redact
from reconciler.errors import PermanentError, TransientError
from reconciler.model import Image

PAYLOAD = os.urandom(3 * 65536 + 123)
PAYLOAD_SHA = hashlib.sha256(PAYLOAD).hexdigest()
WRONG_SHA = "0" * 64


@dataclass
class Server:
    """A tiny HTTP server; ``routes`` maps a path to (status, body, headers)."""

    base: str
    routes: dict[str, tuple[int, bytes, dict[str, str]]] = field(default_factory=dict)
    hits: dict[str, int] = field(default_factory=dict)
    truncate: set[str] = field(default_factory=set)

    def url(self, path: str) -> str:
        return self.base + path


@pytest.fixture
def server() -> Iterator[Server]:
    state = Server(base="")

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_HEAD(self) -> None:
            state.hits[f"HEAD {self.path}"] = state.hits.get(f"HEAD {self.path}", 0) + 1
            status, body, headers = state.routes.get(self.path, (404, b"nope", {}))
            self.send_response(status)
            length = headers.get("Content-Length", str(len(body)))
            if length:
                self.send_header("Content-Length", length)
            self.end_headers()

        def do_GET(self) -> None:
            state.hits[self.path] = state.hits.get(self.path, 0) + 1
            status, body, headers = state.routes.get(self.path, (404, b"nope", {}))
            self.send_response(status)
            for name, value in headers.items():
                if name != "Content-Length":
                    self.send_header(name, value)
            length = headers.get("Content-Length", str(len(body)))
            if length:  # "" leaves it out: the body ends when the connection closes
                self.send_header("Content-Length", length)
            self.end_headers()
            if self.path in state.truncate:
                self.wfile.write(body[: len(body) // 2])
                self.wfile.flush()
                self.close_connection = True
                return
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    with serving(Handler) as port:
        state.base = f"http://127.0.0.1:{port}"
        yield state


def image(url: str, sha256: str | None = None, key: str = "debian-12") -> Image:
    return Image(key=key, url=url, sha256=sha256)


def visible_files(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir()) if root.exists() else []


def test_file_url_is_copied_into_the_cache_and_verified(tmp_path: Path) -> None:
    source = tmp_path / "src" / "image.qcow2"
    source.parent.mkdir()
    source.write_bytes(PAYLOAD)
    cache = ImageCache(tmp_path / "cache", allowed_file_dirs=[source.parent])
    got = cache.fetch(image(source.as_uri(), PAYLOAD_SHA))
    assert got == CachedImage(
        path=cache.path_for(image(source.as_uri())), sha256=PAYLOAD_SHA, size=len(PAYLOAD)
    )
    assert got.path.read_bytes() == PAYLOAD
    assert got.path.parent == tmp_path / "cache"


def test_http_download_from_loopback_is_verified_while_streaming(
    tmp_path: Path, server: Server
) -> None:
    server.routes["/d.qcow2"] = (200, PAYLOAD, {})
    cache = ImageCache(tmp_path / "cache", chunk_size=4096)
    got = cache.fetch(image(server.url("/d.qcow2"), PAYLOAD_SHA.upper()))
    assert got.sha256 == PAYLOAD_SHA
    assert got.path.read_bytes() == PAYLOAD
    assert [n for n in visible_files(tmp_path / "cache") if n.startswith(".partial-")] == []


def test_image_without_sha_reports_the_computed_sha(tmp_path: Path, server: Server) -> None:
    server.routes["/d.qcow2"] = (200, PAYLOAD, {})
    got = ImageCache(tmp_path / "cache").fetch(image(server.url("/d.qcow2")))
    assert got.sha256 == PAYLOAD_SHA and got.size == len(PAYLOAD)


def test_sha_mismatch_is_permanent_names_both_sums_and_leaves_nothing(
    tmp_path: Path, server: Server
) -> None:
    server.routes["/d.qcow2"] = (200, PAYLOAD, {})
    root = tmp_path / "cache"
    with pytest.raises(PermanentError) as caught:
        ImageCache(root).fetch(image(server.url("/d.qcow2"), WRONG_SHA))
    assert WRONG_SHA in str(caught.value) and PAYLOAD_SHA in str(caught.value)
    assert visible_files(root) == []


def test_sha_mismatch_from_a_file_url_leaves_nothing(tmp_path: Path) -> None:
    source = tmp_path / "image.raw"
    source.write_bytes(PAYLOAD)
    root = tmp_path / "cache"
    with pytest.raises(PermanentError, match=r"expected 0+, got"):
        ImageCache(root, allowed_file_dirs=[tmp_path]).fetch(image(source.as_uri(), WRONG_SHA))
    assert visible_files(root) == []


def test_a_cached_image_is_reused_without_downloading_again(tmp_path: Path, server: Server) -> None:
    server.routes["/d.qcow2"] = (200, PAYLOAD, {})
    cache = ImageCache(tmp_path / "cache")
    first = cache.fetch(image(server.url("/d.qcow2"), PAYLOAD_SHA))
    second = ImageCache(tmp_path / "cache").fetch(image(server.url("/d.qcow2"), PAYLOAD_SHA))
    assert first == second
    assert server.hits["/d.qcow2"] == 1


def test_an_image_without_sha_is_not_rehashed_on_reuse(
    tmp_path: Path, server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    server.routes["/d.qcow2"] = (200, PAYLOAD, {})
    cache = ImageCache(tmp_path / "cache")
    cache.fetch(image(server.url("/d.qcow2")))

    def no_hashing(path: Path) -> str:
        raise AssertionError(f"re-hashed {path}")

    monkeypatch.setattr("reconciler.adapters.hypervisor.images.download._hash_file", no_hashing)
    again = cache.fetch(image(server.url("/d.qcow2")))
    assert again.sha256 == PAYLOAD_SHA
    assert server.hits["/d.qcow2"] == 1


def test_a_changed_file_behind_the_sidecar_is_rehashed_not_trusted(
    tmp_path: Path, server: Server
) -> None:
    server.routes["/d.qcow2"] = (200, PAYLOAD, {})
    cache = ImageCache(tmp_path / "cache")
    got = cache.fetch(image(server.url("/d.qcow2"), PAYLOAD_SHA))
    got.path.write_bytes(PAYLOAD[:-1] + b"X")  # same size, new mtime, different content
    os.utime(got.path, ns=(1, 1))
    again = cache.fetch(image(server.url("/d.qcow2"), PAYLOAD_SHA))
    assert again.path.read_bytes() == PAYLOAD
    assert server.hits["/d.qcow2"] == 2


def test_a_changed_configured_sha_downloads_again(tmp_path: Path, server: Server) -> None:
    server.routes["/d.qcow2"] = (200, PAYLOAD, {})
    cache = ImageCache(tmp_path / "cache")
    cache.fetch(image(server.url("/d.qcow2")))
    new = os.urandom(1000)
    server.routes["/d.qcow2"] = (200, new, {})
    got = cache.fetch(image(server.url("/d.qcow2"), hashlib.sha256(new).hexdigest()))
    assert got.path.read_bytes() == new
    assert server.hits["/d.qcow2"] == 2


def test_a_truncated_body_is_transient_and_leaves_nothing(tmp_path: Path, server: Server) -> None:
    server.routes["/d.qcow2"] = (200, PAYLOAD, {})
    server.truncate.add("/d.qcow2")
    root = tmp_path / "cache"
    with pytest.raises(TransientError):
        ImageCache(root, timeout=5).fetch(image(server.url("/d.qcow2")))
    assert visible_files(root) == []


@pytest.mark.parametrize(
    ("status", "error"),
    [
        (500, TransientError),
        (503, TransientError),
        (429, TransientError),
        (404, PermanentError),
        (403, PermanentError),
    ],
)
def test_http_errors_are_classified(
    tmp_path: Path, server: Server, status: int, error: type[Exception]
) -> None:
    server.routes["/x"] = (status, b"", {})
    with pytest.raises(error, match=f"HTTP {status}"):
        ImageCache(tmp_path / "cache").fetch(image(server.url("/x")))
    assert visible_files(tmp_path / "cache") == []


def test_a_refused_connection_is_transient(tmp_path: Path, server: Server) -> None:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(TransientError):
        ImageCache(tmp_path / "cache", timeout=2).fetch(image(f"http://127.0.0.1:{port}/d"))


def test_a_missing_local_file_is_permanent(tmp_path: Path) -> None:
    with pytest.raises(PermanentError, match="cannot open"):
        ImageCache(tmp_path / "cache", allowed_file_dirs=[tmp_path]).fetch(
            image((tmp_path / "missing.qcow2").as_uri())
        )


def test_a_redirect_to_plain_http_off_loopback_is_refused(tmp_path: Path, server: Server) -> None:
    server.routes["/r"] = (302, b"", {"Location": "http://192.0.2.1/evil.qcow2"})
    with pytest.raises(PermanentError, match=r"192\.0\.2\.1"):
        ImageCache(tmp_path / "cache").fetch(image(server.url("/r")))


def test_a_redirect_on_loopback_is_followed(tmp_path: Path, server: Server) -> None:
    server.routes["/r"] = (302, b"", {"Location": server.url("/d.qcow2")})
    server.routes["/d.qcow2"] = (200, PAYLOAD, {})
    got = ImageCache(tmp_path / "cache").fetch(image(server.url("/r"), PAYLOAD_SHA))
    assert got.sha256 == PAYLOAD_SHA


@pytest.mark.parametrize(
    "url",
    [
        "http://example.org/d.qcow2",
        "http://10.0.0.1/d.qcow2",
        "ftp://example.org/d.qcow2",
        "file://otherhost/srv/d.qcow2",
        "d.qcow2",
    ],
)
def test_urls_the_cache_will_not_fetch_are_permanent_errors(url: str) -> None:
    with pytest.raises(PermanentError):
        check_url(url)


@pytest.mark.parametrize(
    "url",
    [
        "https://example.org/d.qcow2",
        "file:///srv/d.qcow2",
        "http://127.0.0.1:8080/d",
        "http://localhost/d",
    ],
)
def test_https_file_and_loopback_http_are_accepted(url: str) -> None:
    check_url(url, allowed_file_dirs=[Path("/srv")])


@pytest.mark.parametrize(
    ("url", "allowed"),
    [
        ("file:///dev/zero", []),
        ("file:///dev/zero", ["/srv/images"]),
        ("file:///etc/proxyfleet/ssh/id_ed25519", ["/srv/images"]),
        ("file:///srv/images/../../etc/shadow", ["/srv/images"]),
        ("file:///srv/images", ["/srv/images"]),
        ("file:///srv/images-evil/d.qcow2", ["/srv/images"]),
    ],
)
def test_a_file_url_outside_the_allow_listed_directories_is_refused_at_once(
    url: str, allowed: list[str]
) -> None:
    with pytest.raises(PermanentError, match="outside the directories the daemon config allows"):
        check_url(url, allowed_file_dirs=[Path(a) for a in allowed])


def test_a_link_in_an_allowed_directory_pointing_out_of_it_is_refused(tmp_path: Path) -> None:
    allowed = tmp_path / "images"
    allowed.mkdir()
    (allowed / "d.qcow2").symlink_to("/dev/zero")
    cache = ImageCache(tmp_path / "cache", allowed_file_dirs=[allowed])
    with pytest.raises(PermanentError, match="outside the directories"):
        cache.fetch(image((allowed / "d.qcow2").as_uri()))
    assert visible_files(tmp_path / "cache") == []


def test_a_device_in_an_allowed_directory_is_not_a_regular_file(tmp_path: Path) -> None:
    cache = ImageCache(tmp_path / "cache", allowed_file_dirs=[Path("/dev")])
    with pytest.raises(PermanentError, match="not a regular file"):
        cache.fetch(image("file:///dev/zero"))


def test_an_image_announced_over_the_cap_is_refused_before_the_first_byte(
    tmp_path: Path, server: Server
) -> None:
    server.routes["/d.qcow2"] = (200, PAYLOAD, {})
    cache = ImageCache(tmp_path / "cache", max_bytes=len(PAYLOAD) - 1)
    with pytest.raises(PermanentError, match="over the limit"):
        cache.fetch(image(server.url("/d.qcow2"), PAYLOAD_SHA))
    assert visible_files(tmp_path / "cache") == []


def test_a_file_over_the_cap_is_refused(tmp_path: Path) -> None:
    allowed = tmp_path / "images"
    allowed.mkdir()
    source = allowed / "big.raw"
    source.write_bytes(b"\0" * 300_000)
    cache = ImageCache(tmp_path / "cache", allowed_file_dirs=[allowed], max_bytes=100_000)
    with pytest.raises(PermanentError, match="over the limit"):
        cache.fetch(image(source.as_uri()))
    assert visible_files(tmp_path / "cache") == []


def test_a_body_without_a_length_is_cut_off_at_the_cap(tmp_path: Path, server: Server) -> None:
    server.routes["/d.qcow2"] = (200, b"\0" * 300_000, {"Content-Length": ""})
    cache = ImageCache(tmp_path / "cache", max_bytes=100_000, chunk_size=4096)
    with pytest.raises(PermanentError, match="grew past the limit"):
        cache.fetch(image(server.url("/d.qcow2")))
    assert visible_files(tmp_path / "cache") == []


def test_a_full_disk_while_caching_is_a_clear_permanent_error(
    tmp_path: Path, server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    import errno

    server.routes["/d.qcow2"] = (200, PAYLOAD, {})
    cache = ImageCache(tmp_path / "cache")
    real_fdopen = os.fdopen

    class FullDisk:
        def __init__(self, handle: Any) -> None:
            self._handle = handle

        def __enter__(self) -> FullDisk:
            return self

        def __exit__(self, *exc: object) -> None:
            self._handle.close()

        def write(self, data: bytes) -> int:
            raise OSError(errno.ENOSPC, "No space left on device")

        def __getattr__(self, name: str) -> Any:
            return getattr(self._handle, name)

    monkeypatch.setattr(os, "fdopen", lambda fd, mode: FullDisk(real_fdopen(fd, mode)))
    with pytest.raises(PermanentError, match="is full"):
        cache.fetch(image(server.url("/d.qcow2"), PAYLOAD_SHA))


def test_log_lines_never_carry_url_credentials_or_query() -> None:
    assert redact("https://user:token@example.org:8443/a/b.qcow2?sig=secret#f") == (
        "https://example.org:8443/a/b.qcow2"
    )


def test_progress_is_logged_with_bytes_and_rate(
    tmp_path: Path, server: Server, caplog: pytest.LogCaptureFixture
) -> None:
    server.routes["/d.qcow2"] = (200, PAYLOAD, {})
    ticks = iter(range(0, 10_000, 3))
    cache = ImageCache(
        tmp_path / "cache",
        chunk_size=65536,
        progress_interval=5.0,
        clock=lambda: float(next(ticks)),
    )
    with caplog.at_level(logging.INFO, logger="reconciler.progress"):
        cache.fetch(image(server.url("/d.qcow2")))
    progress = [r.getMessage() for r in caplog.records if "MB/s" in r.getMessage()]
    assert any("MiB downloaded" in line for line in progress)
    assert any(f"downloaded {len(PAYLOAD)} bytes" in line for line in progress)
    # One line as it starts, then at most one per interval: 4 chunks, clock +3 s per read.
    assert progress[0].startswith("Image debian-12: 0.0 of ")
    assert sum("MiB downloaded" in line for line in progress) <= 3
    events = [r.progress for r in caplog.records if hasattr(r, "progress")]
    assert events[-1].finished and events[-1].done == len(PAYLOAD) == events[-1].total


def test_concurrent_fetches_of_one_image_download_it_once(tmp_path: Path, server: Server) -> None:
    server.routes["/d.qcow2"] = (200, PAYLOAD, {})
    cache = ImageCache(tmp_path / "cache")
    results: list[CachedImage] = []
    threads = [
        threading.Thread(target=lambda: results.append(cache.fetch(image(server.url("/d.qcow2")))))
        for _ in range(4)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert len(results) == 4 and len(set(results)) == 1
    assert server.hits["/d.qcow2"] == 1


def test_stale_partial_downloads_are_swept(tmp_path: Path, server: Server) -> None:
    root = tmp_path / "cache"
    root.mkdir()
    stale = root / ".partial-old.qcow2"
    stale.write_bytes(b"half")
    old = time.time() - 7 * 3600
    os.utime(stale, (old, old))
    fresh = root / ".partial-new.qcow2"
    fresh.write_bytes(b"busy")
    server.routes["/d.qcow2"] = (200, PAYLOAD, {})
    ImageCache(root).fetch(image(server.url("/d.qcow2")))
    assert not stale.exists() and fresh.exists()


def test_the_size_of_a_cached_image_is_its_verified_copys_without_a_request(
    tmp_path: Path, server: Server
) -> None:
    server.routes["/d.qcow2"] = (200, PAYLOAD, {})
    cache = ImageCache(tmp_path / "cache")
    wanted = image(server.url("/d.qcow2"), PAYLOAD_SHA)
    cache.fetch(wanted)
    server.routes["/d.qcow2"] = (200, b"", {"Content-Length": "99"})  # a HEAD would say 99
    assert cache.size(wanted) == len(PAYLOAD)
    assert server.hits == {"/d.qcow2": 1}


def test_the_size_of_an_image_not_cached_is_asked_with_one_head_and_nothing_is_downloaded(
    tmp_path: Path, server: Server
) -> None:
    server.routes["/d.qcow2"] = (200, PAYLOAD, {})
    cache = ImageCache(tmp_path / "cache")
    assert cache.size(image(server.url("/d.qcow2"), PAYLOAD_SHA)) == len(PAYLOAD)
    assert server.hits == {"HEAD /d.qcow2": 1}
    assert visible_files(tmp_path / "cache") == []


def test_a_cached_copy_of_another_checksum_does_not_tell_the_size(
    tmp_path: Path, server: Server
) -> None:
    server.routes["/d.qcow2"] = (200, PAYLOAD, {})
    cache = ImageCache(tmp_path / "cache")
    cache.fetch(image(server.url("/d.qcow2")))
    server.routes["/d.qcow2"] = (200, b"", {"Content-Length": "4096"})
    assert cache.size(image(server.url("/d.qcow2"), WRONG_SHA)) == 4096
    assert server.hits["HEAD /d.qcow2"] == 1


def test_the_size_of_a_file_url_is_the_files(tmp_path: Path) -> None:
    source = tmp_path / "src" / "image.qcow2"
    source.parent.mkdir()
    source.write_bytes(PAYLOAD)
    cache = ImageCache(tmp_path / "cache", allowed_file_dirs=[source.parent])
    assert cache.size(image(source.as_uri())) == len(PAYLOAD)
    assert visible_files(tmp_path / "cache") == []


def test_a_size_nobody_tells_is_none_never_zero(tmp_path: Path, server: Server) -> None:
    import socket

    server.routes["/chunked"] = (200, PAYLOAD, {"Content-Length": ""})
    cache = ImageCache(tmp_path / "cache", timeout=2, allowed_file_dirs=[tmp_path / "src"])
    assert cache.size(image(server.url("/chunked"))) is None
    assert cache.size(image(server.url("/missing"))) is None
    assert cache.size(image((tmp_path / "src" / "missing.qcow2").as_uri())) is None
    assert cache.size(image((tmp_path / "elsewhere.qcow2").as_uri())) is None  # not allowed
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    assert cache.size(image(f"http://127.0.0.1:{port}/d")) is None
    assert visible_files(tmp_path / "cache") == []
