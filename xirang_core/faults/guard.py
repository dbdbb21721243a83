"""One worker's protection against faults: resume, checkpoint, heartbeat, health, drills."""

from __future__ import annotations

import logging
from typing import Any

from xirang_core.checkpoint.chunks import chunk_key
from xirang_core.checkpoint.config import CheckpointConfig
from xirang_core.checkpoint.events import record_event
from xirang_core.checkpoint.manager import CheckpointManager
from xirang_core.checkpoint.snapshot import SaveResult
from xirang_core.errors import XirangError
from xirang_core.faults.heartbeat import Heartbeat
from xirang_core.faults.inject import FaultInjector

log = logging.getLogger("xirang.faults")


class UnhealthyDevice(XirangError):
    """A device probe says this worker's device must be drained."""

    exit_code = 1


class RunGuard:
    """Built once per worker after assembly; the loop calls :meth:`on_step_end` every step."""

    def __init__(
        self, manager: CheckpointManager, heartbeat: Heartbeat, injector: FaultInjector | None
    ) -> None:
        self.manager, self.heartbeat, self.injector = manager, heartbeat, injector
        self.start_step = 1

    @classmethod
    def open(cls, config: dict[str, Any], parts: Any, registry: Any) -> RunGuard:
        """Check the device, restore the latest checkpoint, start the heartbeat."""
        ctx = parts.ctx
        check_health(config, ctx, registry)
        drill = config.get("drill") or {}
        injector = FaultInjector(drill, ctx.run_dir, ctx.rank) if drill else None
        manager = CheckpointManager.from_config(
            config,
            ctx,
            parts.wrapped,
            parts.optimizer,
            parts.train,
            registry,
            getattr(parts, "strategy", None),
            injector.fail_hook if injector else None,
        )
        if injector is not None:
            injector.corrupt_latest = lambda: corrupt_newest(manager)
        settings = CheckpointConfig(**(config.get("checkpoint") or {}))
        heartbeat = Heartbeat(ctx.run_dir, ctx.rank, settings.heartbeat_s, settings.hang_timeout_s)
        guard = cls(manager, heartbeat.start(), injector)
        guard.start_step = manager.restore()
        heartbeat.beat(guard.start_step - 1)
        return guard

    def on_step_end(self, step: int) -> None:
        self.heartbeat.beat(step)
        self.manager.on_step_end(step)
        if self.injector is not None:
            self.injector.on_step_end(step)

    def finish(self, step: int) -> SaveResult | None:
        """The final checkpoint; the heartbeat stops once it is committed."""
        try:
            return self.manager.finish(step)
        finally:
            self.heartbeat.stop()


def corrupt_newest(manager: CheckpointManager) -> int | None:
    """Drills only: flip one byte of a chunk that only the newest checkpoint holds."""
    manager.wait()
    cands = [c for c in manager.store.candidates() if c.manifest is not None]
    if not cands:
        return None
    older = set().union(*(c.manifest.chunks() for c in cands[1:]))
    mine = sorted(cands[0].manifest.chunks() - older)
    if not mine:
        return None
    key = chunk_key(mine[0])
    data = bytearray(manager.store.tier.read(key))
    data[len(data) // 2] ^= 0xFF
    manager.store.tier.write(key, bytes(data))
    return cands[0].step


def check_health(config: dict[str, Any], ctx: Any, registry: Any) -> None:
    """Refuse to train on a device its backend's health probe says to drain."""
    if registry is None:
        return
    backend = registry.create("device", config["device"])
    findings = [
        f for f in backend.health() if f.severity == "drain" and f.device in (None, ctx.local_rank)
    ]
    if findings:
        reasons = "; ".join(f"{f.check}: {f.message}" for f in findings)
        record_event(ctx.run_dir, "unhealthy", rank=ctx.rank, reason=reasons)
        raise UnhealthyDevice(
            f"rank {ctx.rank}: device {ctx.device} must be drained ({reasons}); "
            f"run on other devices or fix it and resume from the latest checkpoint"
        )
