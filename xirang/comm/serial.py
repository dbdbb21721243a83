"""One thread that runs multi-round exchanges in submission order.

A hook whose exchange takes several rounds (PowerSGD's P then Q; hierarchical reduce, all-reduce,
broadcast) must not launch a later round from a completion callback: callbacks fire in whatever
order the network finishes, so ranks would issue their collectives in different orders and
mismatch. Running each bucket's rounds on this lane, buckets in the order DDP hands them over
(the same on every rank), keeps the order identical everywhere while backward keeps computing.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any

import torch


class SerialLane:
    """Submit jobs (callables returning a tensor); each returns a future of its result."""

    def __init__(self, name: str = "xirang-comm") -> None:
        self.name = name
        self._jobs: queue.SimpleQueue[tuple[Callable[[], Any], torch.futures.Future]] = (
            queue.SimpleQueue()
        )
        self._thread: threading.Thread | None = None

    def submit(self, job: Callable[[], Any]) -> torch.futures.Future:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
            self._thread.start()
        fut: torch.futures.Future = torch.futures.Future()
        self._jobs.put((job, fut))
        return fut

    def _run(self) -> None:
        while True:
            job, fut = self._jobs.get()
            try:
                fut.set_result(job())
            except BaseException as exc:  # the future carries it to DDP, which raises it
                fut.set_exception(exc)
