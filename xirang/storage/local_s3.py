"""A local S3 endpoint (``moto_server``) for tests, benchmarks and offline development.

    with local_s3() as url:   # http://127.0.0.1:<free port>, AWS_* variables set for it
        ...

It is moto's real HTTP server in its own process, not an in-process mock, so s3fs and botocore
speak to it exactly as to S3.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from xirang_core.errors import ConfigError

TEST_ENV = {"AWS_ACCESS_KEY_ID": "xirang-local", "AWS_DEFAULT_REGION": "us-east-1"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until_up(url: str, timeout: float = 20.0) -> None:
    """Block until an HTTP server answers at ``url`` (any status counts)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(url, timeout=1)
            return
        except urllib.error.HTTPError:
            return
        except OSError:
            time.sleep(0.1)
    raise ConfigError(f"no server answered at {url} within {timeout:.0f} s")


@contextmanager
def moto_process(log: Path | None = None) -> Iterator[int]:
    """``moto_server`` on 127.0.0.1 at a free port; yields the port, stops it on exit. With
    ``log``, the server's request log (a line per request: method, path, status) goes there."""
    exe = shutil.which("moto_server")
    if exe is None:
        raise ConfigError("moto_server not found: pip install 'moto[server]' (in xirang[dev])")
    port = free_port()
    sink = open(log, "ab") if log else None  # noqa: SIM115 - closed below
    proc = subprocess.Popen(
        [exe, "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=sink or subprocess.DEVNULL,
    )
    try:
        wait_until_up(f"http://127.0.0.1:{port}/")
        yield port
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        if sink is not None:
            sink.close()


@contextmanager
def aws_env(endpoint: str, secret: str) -> Iterator[None]:
    """AWS_* variables pointing botocore at ``endpoint``; the previous values come back after."""
    saved = dict(os.environ)
    os.environ.update(TEST_ENV, AWS_SECRET_ACCESS_KEY=secret, AWS_ENDPOINT_URL=endpoint)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


@contextmanager
def local_s3(
    bucket: str = "xirang", secret: str = "local-secret", log: Path | None = None
) -> Iterator[str]:
    """A running local S3 with ``bucket`` created; yields its endpoint URL (``log``: where its
    request log goes, to count what a client asked of the origin)."""
    import s3fs

    with moto_process(log) as port:
        url = f"http://127.0.0.1:{port}"
        with aws_env(url, secret):
            s3fs.S3FileSystem(skip_instance_cache=True).mkdir(bucket)
            yield url
