"""A real S3 endpoint for the tests: ``moto_server`` on 127.0.0.1 at a free port, behind a TCP
proxy the tests can cut (an origin that goes away) and restore, without losing its objects.

In CI (``CI=true``) a missing ``moto_server`` fails the tests instead of skipping them.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from tests.conftest import require_moto_server
from xirang.storage.local_s3 import aws_env, free_port, moto_process

SECRET = "xirang-test-secret-never-logged"


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
            with contextlib.suppress(OSError):
                listener.shutdown(socket.SHUT_RDWR)  # wakes the accepting thread, frees the port
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
    secret: str = SECRET
    bucket: str = "xirang-test"


@pytest.fixture(scope="module")
def s3_server() -> Iterator[S3Server]:
    import s3fs

    require_moto_server()
    with moto_process() as port:
        proxy = Proxy(port)
        server = S3Server(f"http://127.0.0.1:{proxy.port}", proxy)
        with aws_env(server.url, SECRET):
            s3fs.S3FileSystem(skip_instance_cache=True).mkdir(server.bucket)
            yield server
