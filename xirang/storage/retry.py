"""Requests to an origin: bounded in concurrency and rate, retried with backoff, throttling shared.

When the origin says "slow down" (S3 ``SlowDown``, ``503``), every thread of the process pauses
until the backoff deadline rather than each one retrying at once, so throttling is not multiplied
by the number of workers. An origin that goes away (connection refused, timeouts) is retried with
exponential backoff and jitter until ``deadline_s``; a missing object fails at once.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")

THROTTLE_MARKERS = ("slowdown", "slow down", "reduce your request rate", "throttl", "503")
PERMANENT = (FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError)


@dataclass(frozen=True)
class RetryPolicy:
    """Concurrency and backoff for one origin (``data.origin_*`` settings)."""

    max_concurrency: int = 8
    max_requests_per_s: float = 0.0  # 0 = no rate bound, only the concurrency bound
    base_delay_s: float = 0.2
    max_delay_s: float = 10.0
    deadline_s: float = 300.0


def is_throttle(exc: BaseException) -> bool:
    """True for answers that ask the client to send fewer requests."""
    code = (
        getattr(exc, "response", {}).get("Error", {}).get("Code", "")
        if hasattr(exc, "response")
        else ""
    )
    text = f"{code} {exc}".lower()
    return any(marker in text for marker in THROTTLE_MARKERS)


def is_transient(exc: BaseException) -> bool:
    """True when trying again later may succeed (network, server errors, throttling)."""
    if isinstance(exc, PERMANENT):
        return False
    if is_throttle(exc):
        return True
    names = {c.__name__ for c in type(exc).__mro__}
    return bool(
        isinstance(exc, OSError | ConnectionError | TimeoutError)
        or names
        & {
            "EndpointConnectionError",
            "ConnectionClosedError",
            "ClientOSError",
            "ServerDisconnectedError",
            "ReadTimeoutError",
            "ConnectTimeoutError",
        }
    )


class Throttle:
    """Runs origin requests with a concurrency bound and a backoff shared by all threads."""

    def __init__(
        self, policy: RetryPolicy | None = None, sleep: Callable[[float], None] = time.sleep
    ):
        self.policy = policy or RetryPolicy()
        self.slots = threading.BoundedSemaphore(max(1, self.policy.max_concurrency))
        self.pause_until = 0.0
        self.next_slot = 0.0
        self.lock = threading.Lock()
        self.sleep = sleep
        self.retries = 0
        self.requests = 0

    def call(self, fn: Callable[[], T]) -> T:
        """``fn()`` with retries; re-raises the last error once the deadline has passed."""
        started = time.monotonic()
        attempt = 0
        while True:
            self._wait_for_pause()
            try:
                with self.slots:
                    self.requests += 1
                    return fn()
            except Exception as exc:
                if not is_transient(exc) or time.monotonic() - started > self.policy.deadline_s:
                    raise
                delay = self._delay(attempt)
                attempt += 1
                self.retries += 1
                if is_throttle(exc):
                    with self.lock:
                        self.pause_until = max(self.pause_until, time.monotonic() + delay)
                else:
                    self.sleep(delay)

    def _delay(self, attempt: int) -> float:
        p = self.policy
        return min(p.max_delay_s, p.base_delay_s * 2**attempt) * random.uniform(0.5, 1.0)

    def _wait_for_pause(self) -> None:
        """Wait out a shared throttling pause, then for this request's slot under the rate."""
        with self.lock:
            now = time.monotonic()
            start = max(now, self.pause_until)
            if self.policy.max_requests_per_s > 0:
                start = max(start, self.next_slot)
                self.next_slot = start + 1.0 / self.policy.max_requests_per_s
        if start > now:
            self.sleep(start - now)
