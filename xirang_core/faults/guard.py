"""One worker's protection against faults: resume, checkpoint, heartbeat, health, drills."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from xirang_core.checkpoint.chunks import chunk_key
from xirang_core.checkpoint.config import CheckpointConfig
from xirang_core.checkpoint.events import recovery_note
from xirang_core.checkpoint.manager import CheckpointManager
from xirang_core.checkpoint.snapshot import SaveResult
from xirang_core.faults.health import check_device, drain_reason, local_device
from xirang_core.faults.heartbeat import Heartbeat
from xirang_core.specs import FaultInjector

if TYPE_CHECKING:  # the worker builds the parts and opens the guard over them
    from xirang_core.train.worker import Assembly

log = logging.getLogger("xirang.faults")


class RunGuard:
    """Built once per worker after assembly; the loop calls :meth:`on_step_end` every step."""

    def __init__(
        self,
        manager: CheckpointManager,
        heartbeat: Heartbeat,
        injector: FaultInjector | None,
        device: Any = None,
    ) -> None:
        self.manager, self.heartbeat, self.injector = manager, heartbeat, injector
        self.device = device  # the device backend whose probe is asked at every checkpoint
        self.start_step = 1
        self.reported: SaveResult | None = None  # the save whose times figures() last gave

    @classmethod
    def open(cls, config: dict[str, Any], parts: Assembly, registry: Any) -> RunGuard:
        """Check the device, restore the latest checkpoint, start the heartbeat."""
        ctx = parts.ctx
        device = registry.create("device", config["device"]) if registry is not None else None
        if device is not None:
            check_device(device, ctx)
        injector = _injector(config, ctx, registry)
        manager = CheckpointManager.from_config(
            config,
            ctx,
            parts.wrapped,
            parts.optimizer,
            parts.train,
            registry,
            parts.strategy,
            injector.fail_hook if injector else None,
        )
        if parts.balancer is not None:  # adaptive shares resume too
            manager.stateful["balance"] = parts.balancer
        settings = CheckpointConfig(**(config.get("checkpoint") or {}))
        heartbeat = Heartbeat(ctx.run_dir, ctx.rank, settings.heartbeat_s, settings.hang_timeout_s)
        guard = cls(manager, heartbeat.start(), injector, device)
        guard.start_step = manager.restore()
        heartbeat.beat(guard.start_step - 1)
        return guard

    def on_step_end(self, step: int) -> None:
        self.heartbeat.beat(step)
        self.manager.on_step_end(step)
        if self.device is not None and self.manager.last_saved == step:
            self._check_device(step)
        if self.injector is not None:
            self.injector.on_step_end(step, lambda: corrupt_newest(self.manager))

    def _check_device(self, step: int) -> None:
        """At each checkpoint, ask the device's probe again; a device to drain stops this
        worker once the checkpoint is committed, so the restart elsewhere loses no steps."""
        if not drain_reason(self.device, local_device(self.manager.ctx.local_rank)):
            return
        self.manager.wait()
        self.heartbeat.stop()
        check_device(self.device, self.manager.ctx, step)

    def figures(self) -> dict[str, float]:
        """The newest committed save's times, once (the loop adds them to its next record):
        how long training stood still for it, and its whole time to commit."""
        result = self.manager.last_result
        if result is None or result is self.reported:
            return {}
        self.reported = result
        timings = result.timings
        return {
            "ckpt_stall_s": timings.get("stall_s", 0.0),
            "ckpt_save_s": round(sum(timings.values()), 4),
        }

    def recovery_note(self) -> str:
        """The newest committed checkpoint and how to resume from it (after the save in flight,
        if any, is committed or failed)."""
        self.manager.wait()
        return recovery_note(self.manager.ctx.run_dir)

    def finish(self, step: int) -> SaveResult | None:
        """The final checkpoint; the heartbeat stops once it is committed."""
        try:
            return self.manager.finish(step)
        finally:
            self.heartbeat.stop()


def _injector(config: dict[str, Any], ctx: Any, registry: Any) -> FaultInjector | None:
    """A drill's faults for this worker, from the plugin that injects them (compose refused a
    ``drill`` section when no installed plugin does)."""
    if not config.get("drill") or registry is None:
        return None
    injector: FaultInjector | None = registry.hook.xirang_fault_injector(
        config=config, run_dir=ctx.run_dir, rank=ctx.rank
    )
    return injector


def corrupt_newest(manager: CheckpointManager) -> int | None:
    """Drills only: flip one byte of a chunk that only the newest checkpoint holds."""
    manager.wait()
    cands = [c for c in manager.store.candidates() if c.manifest is not None]
    if not cands:
        return None
    manifests = [c.manifest for c in cands if c.manifest is not None]
    older = set().union(*(m.chunks() for m in manifests[1:]))
    mine = sorted(manifests[0].chunks() - older)
    if not mine:
        return None
    key = chunk_key(mine[0])
    data = bytearray(manager.store.tier.read(key))
    data[len(data) // 2] ^= 0xFF
    manager.store.tier.write(key, bytes(data))
    return cands[0].step
