"""pool_chaos.py's list phases' parts, on the leading replica (issue 49): a tenant that stores
500 jobs of 60 KB (a 30 MB listing, within the default caps of 2,000 jobs and 32 MiB of
payload), 60 slow readers of that listing, and a tenant reading it in a loop.

A slow reader asks for ``GET /v1/jobs`` with a 4 KiB receive window and reads nothing: what it
holds of the service is one page (at most 256 KiB, :mod:`xirang_service.web.pages`) and the
kernel's send buffer, until the send deadline cuts it. Before pages and the deadline, 60 of
them grew the service from 94 to 1,849 MiB and held it there.
"""

from __future__ import annotations

import socket
import time
from pathlib import Path

from xirang_service.pool.client import PoolClient

#: the listing tenant's jobs: how many, how many bytes of payload each, and their names' start
JOBS, JOB_BYTES, NAMED = 500, 60_000, "big-list-"
#: a tenant reading its whole listing, page after page, in a loop (its own process)
LISTER = r"""
import sys, time
from xirang_service.pool.client import PoolClient
url, token, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
pool = PoolClient(url, token, timeout=60)
end = time.monotonic() + seconds
while time.monotonic() < end:
    pool.listing("/v1/jobs")
"""


def fill(pool: PoolClient) -> int:
    """The tenant's :data:`JOBS` jobs of :data:`JOB_BYTES` each; the bytes it stored."""
    payload = {"note": "x" * JOB_BYTES}
    for i in range(JOBS):
        pool.submit(cards=1, name=f"{NAMED}{i}", payload=payload)
    return JOBS * JOB_BYTES


def rss_mib(pid: int) -> float:
    """The resident memory of process ``pid`` now, in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise ValueError(f"no VmRSS for process {pid}")


def slow_readers(url: str, token: str, count: int, seconds: float, pid: int) -> list[float]:
    """``count`` connections asking for the tenant's listing and reading nothing for
    ``seconds``; the service's resident memory (MiB) every 50 ms meanwhile."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    head = f"GET /v1/jobs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n\r\n"
    readers = []
    for _ in range(count):
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # a small window: it stalls
        sock.connect((host, int(port)))
        sock.sendall(head.encode())
        readers.append(sock)
    samples = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        samples.append(rss_mib(pid))
        time.sleep(0.05)
    for sock in readers:
        sock.close()
    return samples
