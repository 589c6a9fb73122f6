"""One HTTP/1.1 request as the endpoint reads it: in pieces, each byte looked at once.

A request arrives in pieces of any size (``Incoming.feed``). The end of the head
(request line and headers, at most ``max_head_bytes``) is searched for only in the
bytes that are new since the last piece, and the body is never held: as it arrives it
either goes through the HMAC that will check its signature or is dropped. A 1 MiB body
costs one pass over 1 MiB however it is cut, and no copy of it.

What is refused, and with which status: heads over ``max_head_bytes`` (431), bodies
declared over ``max_body`` (413, as soon as the head is in), chunked bodies (411), a POST
without ``Content-Length`` (411), a malformed request line, header or length (400), and
any byte past the declared body (400: one request per connection).
"""

from __future__ import annotations

import hmac
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from http import HTTPStatus


@dataclass(frozen=True, slots=True)
class Head:
    """The request line and headers (names lower-cased); ``length`` the body's bytes."""

    method: str
    path: str
    headers: Mapping[str, str]
    length: int


@dataclass(frozen=True, slots=True)
class Request:
    """A complete request. ``digest``: ``sha256=<hex>`` of the body's HMAC when the
    endpoint asked for one at the head (``Incoming``'s ``digest_for``), else None."""

    method: str
    path: str
    headers: Mapping[str, str]
    peer: str
    digest: str | None = None


class Incoming:
    """The request being read on one connection; ``feed`` it what arrives.

    ``digest_for`` is asked once, when the head is complete, for the HMAC the body should
    go through (None: the body is read and dropped).
    """

    def __init__(
        self,
        peer: str,
        *,
        max_head_bytes: int,
        max_body: int,
        digest_for: Callable[[Head], hmac.HMAC | None],
    ) -> None:
        self.peer = peer
        self._max_head = max_head_bytes
        self._max_body = max_body
        self._digest_for = digest_for
        self._head_bytes = bytearray()
        self._head: Head | None = None
        self._digest: hmac.HMAC | None = None
        self._left = 0
        self.bytes_seen = 0
        """Bytes fed so far (each is looked at once, at most four of them twice)."""
        self.outcome: Request | HTTPStatus | None = None
        """The request, or the status to refuse it with; None while it is incomplete."""

    def feed(self, data: bytes | memoryview) -> bool:
        """Take the next piece; True once ``outcome`` is set (nothing more is read)."""
        self.bytes_seen += len(data)
        if self._head is None:
            before = len(self._head_bytes)
            self._head_bytes += data
            end = self._head_bytes.find(b"\r\n\r\n", max(0, before - 3))
            if end < 0 or end > self._max_head:
                if end >= 0 or len(self._head_bytes) > self._max_head:
                    return self._refuse(HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE)
                return False
            head = parse_head(bytes(self._head_bytes[:end]), max_body=self._max_body)
            if isinstance(head, HTTPStatus):
                return self._refuse(head)
            self._head_bytes = bytearray()
            self._head, self._left = head, head.length
            self._digest = self._digest_for(head)
            data = memoryview(data)[end + 4 - before :]  # what followed the head in this piece
        return self._body(self._head, data)

    def _body(self, head: Head, data: bytes | memoryview) -> bool:
        if len(data) > self._left:
            return self._refuse(HTTPStatus.BAD_REQUEST)  # nothing may follow the body
        if self._digest is not None and data:
            self._digest.update(data)
        self._left -= len(data)
        if self._left:
            return False
        digest = "sha256=" + self._digest.hexdigest() if self._digest is not None else None
        self.outcome = Request(head.method, head.path, head.headers, self.peer, digest)
        return True

    def _refuse(self, status: HTTPStatus) -> bool:
        self.outcome = status
        self._head_bytes = bytearray()
        return True


def parse_head(data: bytes, *, max_body: int) -> Head | HTTPStatus:
    """The head in ``data`` (without its closing blank line), or the status to refuse it with."""
    try:
        lines = data.decode("ascii").split("\r\n")
    except UnicodeDecodeError:
        return HTTPStatus.BAD_REQUEST
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1.") or not parts[1].startswith("/"):
        return HTTPStatus.BAD_REQUEST
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, colon, value = line.partition(":")
        if not colon or not name or name != name.strip():
            return HTTPStatus.BAD_REQUEST
        key = name.lower()
        if key in headers and key in ("content-length", "transfer-encoding"):
            return HTTPStatus.BAD_REQUEST
        headers[key] = value.strip()
    if "transfer-encoding" in headers:
        return HTTPStatus.LENGTH_REQUIRED  # chunked bodies are refused: send Content-Length
    method = parts[0]
    length_text = headers.get("content-length")
    if length_text is None:
        if method == "POST":
            return HTTPStatus.LENGTH_REQUIRED
        length = 0
    elif not length_text.isdigit() or len(length_text) > 12:
        return HTTPStatus.BAD_REQUEST
    else:
        length = int(length_text)
    if length > max_body:
        return HTTPStatus.REQUEST_ENTITY_TOO_LARGE
    return Head(method, parts[1], headers, length)


def response(status: HTTPStatus, body: bytes, ctype: str) -> bytes:
    """The whole answer: status line, headers (``Connection: close``) and body."""
    head = (
        f"HTTP/1.1 {status.value} {status.phrase}\r\n"
        f"Server: proxyfleet\r\n"
        f"Content-Type: {ctype}\r\n"
        f"Content-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n"
    )
    return head.encode("ascii") + body
