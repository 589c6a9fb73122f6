"""Which image URLs the cache fetches, and how one is opened (redirects and files included).

``https://``; ``file://`` only below a directory the daemon config allow-lists
(``images.allowFileDirs``); ``http://`` only to loopback. Redirects obey the
same rule and never lead to ``file://``. ``redact`` is the form of a URL a log
line may carry (no credentials, query or fragment).
"""

from __future__ import annotations

import contextlib
import http.client
import os
import ssl
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path
from stat import S_ISREG
from typing import IO

from reconciler import __version__
from reconciler.errors import HostError, PermanentError, TransientError
from reconciler.model.fleet import Image

LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})
_TRANSIENT_HTTP = frozenset({408, 425, 429})


def check_url(url: str, *, allowed_file_dirs: Sequence[Path] = ()) -> None:
    """Refuse any URL the cache would not fetch (PermanentError naming the rule)."""
    parts = urllib.parse.urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme == "https":
        return
    if scheme == "file":
        if parts.netloc not in ("", "localhost"):
            raise PermanentError(f"file URL {redact(url)} names a remote host")
        allowed_file(url, allowed_file_dirs)
        return
    if scheme == "http" and (parts.hostname or "") in LOOPBACK_HOSTS:
        return
    raise PermanentError(
        f"image URL {redact(url)} is not https:// or file:// "
        "(plain http:// is allowed to 127.0.0.1/localhost only)"
    )


def allowed_file(url: str, allowed_file_dirs: Sequence[Path]) -> Path:
    """The real path of a ``file://`` URL when it lies below an allow-listed directory.

    Links are resolved first, so a link inside an allowed directory that
    points out of it is refused too.
    """
    path = Path(urllib.request.url2pathname(urllib.parse.urlsplit(url).path))
    real = Path(os.path.realpath(path))
    for directory in allowed_file_dirs:
        base = Path(os.path.realpath(directory))
        if real.is_relative_to(base) and real != base:
            return real
    allowed = ", ".join(str(d) for d in allowed_file_dirs) or "none"
    raise PermanentError(
        f"file URL {redact(url)} is outside the directories the daemon config allows "
        f"for images (images.allowFileDirs: {allowed})"
    )


def redact(url: str) -> str:
    """The URL without credentials, query or fragment: safe for a log line."""
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, "", ""))


class _CheckedRedirects(urllib.request.HTTPRedirectHandler):
    """Follows a redirect only to a URL the cache would fetch directly."""

    def redirect_request(
        self,
        req: urllib.request.Request,
        fp: IO[bytes],
        code: int,
        msg: str,
        headers: http.client.HTTPMessage,
        newurl: str,
    ) -> urllib.request.Request | None:
        if urllib.parse.urlsplit(newurl).scheme.lower() == "file":
            raise PermanentError(f"redirect to {redact(newurl)} refused")
        check_url(newurl)
        return super().redirect_request(req, fp, code, msg, headers, newurl)


@contextlib.contextmanager
def open_source(
    image: Image, *, timeout: float, allowed: Sequence[Path]
) -> Iterator[tuple[IO[bytes], int | None]]:
    """The byte stream of ``image.url`` and its length when known."""
    parts = urllib.parse.urlsplit(image.url)
    if parts.scheme.lower() == "file":
        path = allowed_file(image.url, allowed)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError as exc:
            raise PermanentError(f"image {image.key}: cannot open {path}: {exc}") from exc
        with os.fdopen(fd, "rb") as handle:
            info = os.fstat(handle.fileno())
            if not S_ISREG(info.st_mode):
                raise PermanentError(f"image {image.key}: {path} is not a regular file")
            yield handle, info.st_size
        return
    response = _opened(image, _request(image), timeout=timeout)
    with response:
        length = response.headers.get("Content-Length")
        yield response, int(length) if length and length.isdigit() else None


def source_length(image: Image, *, timeout: float, allowed: Sequence[Path]) -> int | None:
    """The size of ``image`` at its source: a file's size, or a HEAD's Content-Length."""
    if urllib.parse.urlsplit(image.url).scheme.lower() == "file":
        path = allowed_file(image.url, allowed)
        try:
            info = path.stat()
        except OSError as exc:
            raise PermanentError(f"image {image.key}: cannot read {path}: {exc}") from exc
        return info.st_size if S_ISREG(info.st_mode) else None
    request = _request(image, method="HEAD")
    with _opened(image, request, timeout=timeout) as response:
        length = response.headers.get("Content-Length")
        return int(length) if length and length.isdigit() else None


def _request(image: Image, *, method: str = "GET") -> urllib.request.Request:
    headers = {"User-Agent": f"proxyfleet/{__version__}"}
    return urllib.request.Request(image.url, headers=headers, method=method)


def _opened(
    image: Image, request: urllib.request.Request, *, timeout: float
) -> http.client.HTTPResponse:
    """The response to ``request``, redirects checked; errors classified."""
    handlers: list[urllib.request.BaseHandler] = [_CheckedRedirects()]
    if (urllib.parse.urlsplit(image.url).hostname or "") in LOOPBACK_HOSTS:
        handlers.append(urllib.request.ProxyHandler({}))
    opener = urllib.request.build_opener(*handlers)
    try:
        response: http.client.HTTPResponse = opener.open(request, timeout=timeout)
    except HostError:
        raise
    except urllib.error.HTTPError as exc:
        cls = TransientError if exc.code >= 500 or exc.code in _TRANSIENT_HTTP else PermanentError
        raise cls(f"image {image.key}: {redact(image.url)} answered HTTP {exc.code}") from exc
    except urllib.error.URLError as exc:
        raise network_error(image, exc.reason) from exc
    except (OSError, http.client.HTTPException) as exc:
        raise network_error(image, exc) from exc
    return response


def network_error(image: Image, reason: object) -> HostError:
    where = f"image {image.key}: fetching {redact(image.url)}"
    if isinstance(reason, ssl.SSLCertVerificationError):
        return PermanentError(f"{where}: TLS certificate refused: {reason}")
    if isinstance(reason, (OSError, http.client.HTTPException, TimeoutError)):
        return TransientError(f"{where}: {str(reason) or type(reason).__name__}")
    return PermanentError(f"{where}: {reason}")
