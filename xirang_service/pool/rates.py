"""Per-project request rates: a token bucket per project (as API gateways and Slurm's
``MaxSubmitJobs`` per association do for their resources), refilled at the project's ``rate``
per second up to ``burst``. A request finding its bucket empty is a 429 whose ``Retry-After``
says when the bucket holds one again; it costs the service a dictionary lookup, not a pass
through the pool's state or its lock."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable

from xirang_service.pool.errors import RateLimited


class RateBuckets:
    """Every project's bucket, in memory: a new leader starts them full."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._lock = threading.Lock()
        self._buckets: dict[str, tuple[float, float]] = {}  # project -> (tokens, as of)

    def take(self, project: str, rate: float, burst: int) -> None:
        """One request of ``project``: taken from its bucket, or RateLimited (429)."""
        if rate <= 0:
            return
        size = burst or max(1, math.ceil(rate))
        with self._lock:
            now = self.clock()
            tokens, then = self._buckets.get(project, (float(size), now))
            tokens = min(float(size), tokens + (now - then) * rate)
            if tokens >= 1.0:
                self._buckets[project] = (tokens - 1.0, now)
                return
            self._buckets[project] = (tokens, now)
        wait = (1.0 - tokens) / rate
        raise RateLimited(
            f"project '{project}' is over its request rate ({rate:g}/s, bursts of {size}); "
            f"try again in {wait:.2f} s (the operator raises it: xirang pool quota {project} "
            "--rate N --burst N, or rate: in the cluster file)",
            math.ceil(wait),
        )
