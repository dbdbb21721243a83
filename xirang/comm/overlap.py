"""How much gradient communication ran while backward was still computing.

DDP hands a bucket to the comm hook as soon as its gradients are ready and waits for every
bucket's future only when backward has finished. The last bucket is handed over when the last
gradient has been computed, so its hand-over time marks the end of backward's compute. For each
backward pass the meter takes the union of the buckets' [launch, completion] intervals: the part
before that mark was hidden behind compute, the rest was exposed (the step waited for it).

The stamps come from the group's clock (:mod:`xirang.comm.clock`): on NCCL, RCCL and HCCL a
bucket's future completes at enqueue, so only device events say when compute and transfer
really ended there. A closed pass is turned into seconds once its last stamp is ready (device
events are never waited for inside backward) or when a report asks.
"""

from __future__ import annotations

import threading
from typing import Any

import torch

from xirang.comm.clock import Clock, HostClock


class OverlapMeter:
    """Hidden and exposed communication seconds, accumulated over backward passes."""

    def __init__(self, clock: Clock | None = None) -> None:
        self.clock: Clock = clock or HostClock()
        self.hidden_s = 0.0
        self.exposed_s = 0.0
        #: the last bucket's seconds from hand-over (backward's end) to completion, its wait
        #: behind buckets still queued included: all after backward, so 1 - last_bucket_s /
        #: comm_s bounds this run's hidden_frac from above
        self.last_bucket_s = 0.0
        self.passes = 0
        self._intervals: list[list[Any]] = []
        self._compute_end: Any = None
        self._closed: list[tuple[list[list[Any]], Any]] = []
        self._lock = threading.Lock()

    def track(self, fut: torch.futures.Future, is_last: bool) -> torch.futures.Future:
        """Time one bucket's communication; ``is_last`` marks the pass's last bucket."""
        now = self.clock.stamp()
        with self._lock:
            if self._compute_end is not None:  # a new backward pass began
                self._close_pass()
            interval = [now, now]
            self._intervals.append(interval)
            if is_last:
                self._compute_end = now

        def done(f: torch.futures.Future) -> Any:
            interval[1] = self.clock.stamp()
            return f.value()

        return fut.then(done)

    def report(self) -> dict[str, Any]:
        """Totals over the passes so far (the open pass is closed first)."""
        with self._lock:
            if self._compute_end is not None:
                self._close_pass()
            self._settle(wait=True)
            total = self.hidden_s + self.exposed_s
            return {
                "backward_passes": self.passes,
                "comm_s": round(total, 4),
                "hidden_s": round(self.hidden_s, 4),
                "exposed_s": round(self.exposed_s, 4),
                "last_bucket_s": round(self.last_bucket_s, 4),
                "hidden_frac": round(self.hidden_s / total, 4) if total else 0.0,
            }

    def _close_pass(self) -> None:
        self._closed.append((self._intervals, self._compute_end))
        self._intervals, self._compute_end = [], None
        self._settle(wait=False)

    def _settle(self, wait: bool) -> None:
        """Seconds of the closed passes whose stamps have happened (all of them if ``wait``)."""
        kept = []
        for intervals, mark in self._closed:
            if not (wait or all(self.clock.ready(end) for _, end in intervals)):
                kept.append((intervals, mark))
                continue
            origin = intervals[0][0]
            offsets = [
                [self.clock.seconds(origin, start), self.clock.seconds(origin, end)]
                for start, end in intervals
            ]
            hidden, exposed = split_busy_time(offsets, self.clock.seconds(origin, mark))
            self.hidden_s += hidden
            self.exposed_s += exposed
            self.last_bucket_s += offsets[-1][1] - offsets[-1][0]
            self.passes += 1
        self._closed = kept


def split_busy_time(intervals: list[list[float]], mark: float) -> tuple[float, float]:
    """Seconds covered by the union of ``intervals`` before and after ``mark``."""
    hidden = exposed = 0.0
    cursor = float("-inf")
    for start, end in sorted(intervals):
        start = max(start, cursor)
        if end <= start:
            continue
        hidden += max(0.0, min(end, mark) - start)
        exposed += max(0.0, end - max(start, mark))
        cursor = end
    return hidden, exposed
