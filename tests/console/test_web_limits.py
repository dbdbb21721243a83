"""The console's login takes a body only of a sound length, refused before the token in it is
checked: no Content-Length (411), one over 4 KiB (413), a negative one (400, by h11; the
standard library's server read such a body until the client gave up)."""

from __future__ import annotations

import http.client
import socket
from urllib.parse import urlparse

import pytest

from xirang_core.console.server import MAX_BODY


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
        (f"Content-Length: {MAX_BODY + 1}\r\n", 413),
        ("", 411),
        # a sound one reaches the checks of its content: no CSRF token, so 403
        ("Content-Length: 7\r\n", 403),
    ],
)
def test_a_login_body_needs_a_sound_length(console, header: str, status: int) -> None:
    assert _login(console, header) == status
