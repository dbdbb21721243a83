"""Fault tolerance: restart from the latest checkpoint, heartbeats, health.

The scheduler restarts every worker when one dies (up to ``trainer.max_restarts``), on healthy
devices only (``health``: a device whose probe says drain, or whose worker's heartbeat went
stale, is evicted); each restarted worker resumes from the latest valid checkpoint.
:class:`RunGuard` wires a worker's checkpoint manager, heartbeat, device probe and (in drills)
the faults a drill injects (through the hook ``xirang_fault_injector``) into the training loop.
The drills and their faults (``xirang drill``) are the plugin ``xirang_ckpt``'s.
"""

from xirang_core.faults.guard import RunGuard

__all__ = ["RunGuard"]
