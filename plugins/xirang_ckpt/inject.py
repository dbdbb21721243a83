"""Faults injected on purpose by ``xirang drill`` (the run's ``drill`` config section).

    drill:
      kill: [[step, rank], ...]    SIGKILL that worker at the end of that step
      fail_save: [step, ...]       that step's save fails midway through writing its chunks
      storage_down: [from, to]     every save in those steps fails: the origin is unreachable
      corrupt: [step, ...]         at the end of that step, flip a byte of the newest
                                   checkpoint, then kill the main worker: the restart must
                                   detect it and resume from the one before
      slow: [[step, rank, cpus], ...]  at the end of that step, that worker's CPU quota becomes
                                   ``cpus``: a rank that slows mid-run (a throttled card, a
                                   noisy neighbour), for real; needs scheduler.worker_quota

Each fault fires once per run, whatever the restarts: a marker under ``<run dir>/drill/`` is
written before it fires, so a restarted worker that passes the same step again trains on.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

from xirang import ConfigError
from xirang.launch import own_cgroup, record_event, set_cpu_quota, worker_quota

DRILL_DIR = "drill"


class InjectedFault(OSError):
    """The error an injected storage fault raises; never seen outside a drill."""


class FaultInjector:
    def __init__(
        self,
        drill: dict[str, Any],
        run_dir: str,
        rank: int,
    ) -> None:
        self.kills = {(int(s), int(r)) for s, r in drill.get("kill", [])}
        self.corrupts = {int(s) for s in drill.get("corrupt", [])}
        self.fail_saves = {int(s) for s in drill.get("fail_save", [])}
        down = drill.get("storage_down") or []
        self.down = range(int(down[0]), int(down[1]) + 1) if down else range(0)
        self.run_dir, self.rank = run_dir, rank
        self.folder = Path(run_dir) / DRILL_DIR
        self.slows = slowdowns(drill.get("slow") or [], rank)

    @property
    def active(self) -> bool:
        return bool(self.kills or self.fail_saves or self.down or self.corrupts or self.slows)

    def _once(self, name: str) -> bool:
        """True the first time ``name`` is claimed in this run (across restarts)."""
        self.folder.mkdir(exist_ok=True)
        try:
            (self.folder / name).open("x").close()
        except FileExistsError:
            return False
        return True

    def on_step_end(self, step: int, corrupt_latest: Callable[[], int | None]) -> None:
        if (step, self.rank) in self.kills and self._once(f"kill-{step}-{self.rank}"):
            self._kill(step)
        if step in self.corrupts and self.rank == 0 and self._once(f"corrupt-{step}"):
            damaged = corrupt_latest()
            record_event(self.run_dir, "corrupt", step=step, checkpoint=damaged)
            self._kill(step)
        if step in self.slows and self._once(f"slow-{step}-{self.rank}"):
            self._slow(step, self.slows[step])

    def _slow(self, step: int, cpus: float) -> None:
        """This worker's cgroup gets the quota ``cpus`` (the kernel throttles it from now on)."""
        was = worker_quota()
        set_cpu_quota(own_cgroup(), cpus)
        record_event(self.run_dir, "slow", step=step, rank=self.rank, cpus=cpus, was=was)

    def _kill(self, step: int) -> None:
        record_event(self.run_dir, "kill", step=step, rank=self.rank)
        os.kill(os.getpid(), signal.SIGKILL)

    def fail_hook(self, step: int) -> Callable[[int], None] | None:
        """For the save at ``step``: a callable that breaks chunk writes, or None."""
        if self.rank != 0:
            return None
        if step in self.down:
            record_event(self.run_dir, "storage_down", step=step)
            return _always_fail
        if step in self.fail_saves and self._once(f"fail-save-{step}"):
            record_event(self.run_dir, "fail_save", step=step)
            return _fail_after(1)
        return None


def slowdowns(entries: list[Any], rank: int) -> dict[int, float]:
    """``drill.slow``'s entries for ``rank``, by step: CPU counts its quota drops (or rises) to.
    The worker must run in a cgroup of its own (``scheduler.worker_quota``): changing another
    cgroup's quota would slow everything in it, not one worker."""
    try:
        parsed = [(int(s), int(r), float(c)) for s, r, c in entries]
    except (TypeError, ValueError):
        parsed = []
    if len(parsed) != len(entries) or any(s < 1 or c <= 0 for s, _, c in parsed):
        raise ConfigError(
            f"drill.slow={entries}: give [step, rank, cpus] entries, step at least 1 and cpus "
            f"above 0, e.g. +drill={{slow:[[4,1,0.4]]}}"
        )
    mine = {s: c for s, r, c in parsed if r == rank}
    if mine and worker_quota() is None:
        raise ConfigError(
            "drill.slow changes a worker's own cgroup CPU quota: run the workers under "
            "scheduler.worker_quota (e.g. scheduler.worker_quota=[1.0,1.0]) on a machine with "
            "the cgroup v1 CPU controller"
        )
    return mine


def _always_fail(index: int) -> None:
    raise InjectedFault("storage origin unreachable (drill)")


def _fail_after(writes: int) -> Callable[[int], None]:
    """Lets ``writes`` chunk writes through, then fails every later one: a save torn midway."""
    count = iter(range(1 << 62))

    def fail(index: int) -> None:
        if next(count) >= writes:
            raise InjectedFault("save failed midway (drill)")

    return fail
