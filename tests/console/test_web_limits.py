"""The console's login takes a body only of a sound length, refused before the token in it is
checked: no Content-Length (411), one over 4 KiB (413), a negative or non-numeric one (400, by
httptools; the standard library's server read such a body until the client gave up). A request
head over 16 KiB is refused (400), whether sent at once or dripped as one endless header."""

from __future__ import annotations

import http.client
import socket
from urllib.parse import urlparse

import pytest

from xirang_service.console.server import LIMITS, MAX_BODY


def _login(console, length_header: str, body: bytes = b"token=x") -> int:
    url = urlparse(console.url)
    head = f"POST /login HTTP/1.1\r\nHost: x\r\n{length_header}Connection: close\r\n\r\n"
    with socket.create_connection((url.hostname, url.port), timeout=5) as sock:
        sock.sendall(head.encode() + body)
        answer = http.client.HTTPResponse(sock)
        answer.begin()
        return answer.status


@pytest.mark.parametrize(
    ("header", "status"),
    [
        ("Content-Length: -1\r\n", 400),
        ("Content-Length: 7x\r\n", 400),
        (f"Content-Length: {MAX_BODY + 1}\r\n", 413),
        ("", 411),
        # a sound one reaches the checks of its content: no CSRF token, so 403
        ("Content-Length: 7\r\n", 403),
    ],
)
def test_a_login_body_needs_a_sound_length(console, header: str, status: int) -> None:
    assert _login(console, header) == status


def _status(console, chunks: list[bytes]) -> int | None:
    """The status the console answers ``chunks`` with; None if it hung up without one (it may
    close while the client is still sending, which the client sees as a broken pipe)."""
    url = urlparse(console.url)
    with socket.create_connection((url.hostname, url.port), timeout=5) as sock:
        try:
            for chunk in chunks:
                sock.sendall(chunk)
        except OSError:
            pass
        line = sock.makefile("rb").readline()
    return int(line.split()[1]) if line else None


def _head(*headers: str) -> bytes:
    return ("GET /login HTTP/1.1\r\nHost: x\r\n" + "".join(headers)).encode()


@pytest.mark.parametrize("dripped", [False, True])
def test_a_request_head_over_the_limit_is_refused(console, dripped: bool) -> None:
    if dripped:  # one header that never ends, a KiB at a time
        chunks = [_head("X-Pad: "), *[b"a" * 1024] * (LIMITS.max_header_bytes // 1024 + 2)]
    else:
        big = "X-Pad: " + "a" * LIMITS.max_header_bytes + "\r\n"
        chunks = [_head(big, "Connection: close\r\n\r\n")]
    assert _status(console, chunks) == 400


def test_a_head_under_the_limit_in_pieces_is_served(console) -> None:
    half = "a" * (LIMITS.max_header_bytes // 2 - 100)
    rest = f"X-Two: {half}\r\nConnection: close\r\n\r\n".encode()
    assert _status(console, [_head(f"X-One: {half}\r\n"), rest]) == 200
