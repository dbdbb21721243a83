"""A real S3 endpoint for the tests: ``moto_server`` on 127.0.0.1 at a free port, behind a TCP
proxy the tests can cut (an origin that goes away) and restore, without losing its objects.

In CI (``CI=true``) a missing ``moto_server`` fails the tests instead of skipping them.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

SECRET = "xirang-test-secret-never-logged"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until_up(url: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(url, timeout=1)
            return
        except OSError as exc:
            if getattr(exc, "code", None):  # an HTTP answer: the server is up
                return
            time.sleep(0.1)
    raise RuntimeError(f"moto_server did not answer at {url}")


class Proxy:
    """Forwards 127.0.0.1:port to the server; ``cut()`` refuses and drops connections."""

    def __init__(self, target: int) -> None:
        self.target, self.port = target, free_port()
        self.listener: socket.socket | None = None
        self.open_conns: list[socket.socket] = []
        self.restore()

    def restore(self) -> None:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        self.listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def cut(self) -> None:
        listener, self.listener = self.listener, None
        if listener:
            listener.close()
        for conn in self.open_conns:
            conn.close()
        self.open_conns.clear()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.target))
            self.open_conns += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.close()


@dataclass
class S3Server:
    url: str
    proxy: Proxy
    bucket: str = "xirang-test"


@pytest.fixture(scope="module")
def s3_server() -> Iterator[S3Server]:
    exe = shutil.which("moto_server")
    if exe is None:
        message = "moto_server not found: pip install 'moto[server]' (in xirang[dev])"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message)
        pytest.skip(message)
    port = free_port()
    proc = subprocess.Popen(
        [exe, "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    saved = dict(os.environ)
    try:
        wait_until_up(f"http://127.0.0.1:{port}/")
        proxy = Proxy(port)
        url = f"http://127.0.0.1:{proxy.port}"
        os.environ.update(
            AWS_ACCESS_KEY_ID="xirang-test-key",
            AWS_SECRET_ACCESS_KEY=SECRET,
            AWS_DEFAULT_REGION="us-east-1",
            AWS_ENDPOINT_URL=url,
        )
        server = S3Server(url, proxy)
        import s3fs

        s3fs.S3FileSystem(skip_instance_cache=True).mkdir(server.bucket)
        yield server
    finally:
        os.environ.clear()
        os.environ.update(saved)
        proc.terminate()
        proc.wait(timeout=10)
