"""Reading one request in pieces (httprequest.Incoming): the same outcome however it is cut."""

from __future__ import annotations

import hashlib
import hmac
from http import HTTPStatus

import pytest

from reconciler.adapters.surface.httpapi import sign
from reconciler.adapters.surface.httprequest import Head, Incoming, Request

SECRET = b"s3cret"
BODY = b'{"ref": "refs/heads/main"}' * 100


def hashed(head: Head) -> hmac.HMAC | None:
    return hmac.new(SECRET, digestmod=hashlib.sha256) if head.method == "POST" else None


def read(raw: bytes, piece: int) -> Request | HTTPStatus | None:
    incoming = Incoming("peer", max_head_bytes=1024, max_body=1 << 20, digest_for=hashed)
    for at in range(0, len(raw), piece):
        if incoming.feed(memoryview(raw)[at : at + piece]):
            break
    return incoming.outcome


POST = b"POST /hook HTTP/1.1\r\nContent-Length: %d\r\nX-A: b\r\n\r\n" % len(BODY) + BODY


@pytest.mark.parametrize("piece", [1, 2, 3, 4, 5, 7, 64, 4096, len(POST)])
def test_a_request_cut_anywhere_reads_as_the_whole_and_its_body_is_hashed_once(
    piece: int,
) -> None:
    assert read(POST, piece) == Request(
        "POST", "/hook", {"content-length": str(len(BODY)), "x-a": "b"}, "peer", sign(SECRET, BODY)
    )


@pytest.mark.parametrize("piece", [1, 3, 4096])
@pytest.mark.parametrize(
    ("raw", "status"),
    [
        (b"GET / HTTP/1.1\r\nX: " + b"a" * 2000, HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE),
        (
            b"GET / HTTP/1.1\r\nX: " + b"a" * 2000 + b"\r\n\r\n",
            HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE,
        ),
        (
            b"POST /hook HTTP/1.1\r\nContent-Length: 2000000\r\n\r\n",
            HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
        ),
    ],
)
def test_what_is_refused_is_refused_however_it_is_cut(
    raw: bytes, status: HTTPStatus, piece: int
) -> None:
    assert read(raw, piece) == status


def test_a_body_nobody_asked_to_hash_is_read_and_dropped() -> None:
    raw = b"GET /healthz HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello"
    assert read(raw, 2) == Request("GET", "/healthz", {"content-length": "5"}, "peer", None)


def test_a_byte_arriving_with_the_body_past_its_length_is_refused() -> None:
    assert read(POST + b"x", 4096) == HTTPStatus.BAD_REQUEST  # one request per connection
