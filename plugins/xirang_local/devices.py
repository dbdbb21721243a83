"""This machine's devices as the local scheduler places workers on them: healthy ones only.

Before every launch the scheduler probes each device; after a failed attempt it also evicts the
device of a worker whose heartbeat went stale (it gave up with a ``hang`` event) or that stopped
on its own probe (an ``unhealthy`` event). The next attempt runs on what is left, with the most
workers the run's batch and parallel plan divide over; workers resume from the latest
checkpoint, resharded to the new world size.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from xirang.launch import read_events, workers_problem
from xirang.worker import drained


@dataclass
class Eviction:
    device: int
    reason: str


@dataclass
class LocalDevices:
    """The run's device backend, its devices, and those evicted so far in this run."""

    backend: Any
    indices: list[int]
    shareable: bool
    config: dict[str, Any]
    evicted: dict[int, str] = field(default_factory=dict)

    @classmethod
    def of_run(cls, run_dir: str, registry: Any) -> LocalDevices:
        """The devices of the backend a run directory's config names."""
        from xirang.worker import CONFIG_FILE

        config = yaml.safe_load((Path(run_dir) / CONFIG_FILE).read_text())
        backend = registry.create("device", config["device"])
        indices = [d.index for d in backend.inventory()]
        return cls(backend, indices, bool(getattr(backend, "shareable", False)), config)

    def probe(self) -> list[Eviction]:
        """Evict every device the backend's probe says to drain; returns the new evictions."""
        found = drained(self.backend)
        every = found.get(None)
        new = []
        for index in self.indices:
            reason = every or found.get(index)
            if reason and index not in self.evicted:
                new.append(self._evict(index, reason))
        return new

    def evict_failed(self, placed: list[int], run_dir: str, since: int) -> list[Eviction]:
        """After a failed attempt: devices the probe drains, and those whose worker hung or
        found its device unhealthy (in the run's events after the first ``since``)."""
        new = self.probe()
        for event in read_events(run_dir)[since:]:
            if event["event"] not in ("hang", "unhealthy"):
                continue
            index = event.get("device")
            if index is None and event.get("rank") is not None and event["rank"] < len(placed):
                index = placed[event["rank"]]
            if index is not None and index not in self.evicted and not self.shareable:
                new.append(self._evict(int(index), event.get("reason") or event["event"]))
        return new

    def _evict(self, index: int, reason: str) -> Eviction:
        self.evicted[index] = reason
        return Eviction(index, reason)

    def place(self, wanted: int) -> list[int]:
        """Device indices for the next attempt, one per worker (a shareable device is used by
        every worker); empty when no healthy placement is left."""
        healthy = [i for i in self.indices if i not in self.evicted]
        if self.shareable:
            return [healthy[0]] * largest_fit(wanted, self.config) if healthy else []
        return healthy[: largest_fit(min(wanted, len(healthy)), self.config)]


def largest_fit(most: int, config: dict[str, Any]) -> int:
    """The most workers, at most ``most``, that the run's global batch, micro-batch and
    parallel degrees divide over (0 if none)."""
    return next((n for n in range(most, 0, -1) if fits(n, config)), 0)


def fits(workers: int, config: dict[str, Any]) -> bool:
    """Whether the run's settings hold on ``workers`` workers: the check the planner's plans
    and the config's own validation pass (xirang_core.parallel.plan.workers_problem)."""
    return not workers_problem(workers, config)
