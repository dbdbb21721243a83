"""Fault tolerance: restart from the latest checkpoint, heartbeats, health, and fault drills.

The elastic launcher restarts every worker when one dies (up to ``trainer.max_restarts``); each
restarted worker resumes from the latest valid checkpoint. :class:`RunGuard` wires a worker's
checkpoint manager, heartbeat and (in drills) fault injection into the training loop.
"""

from xirang_core.faults.guard import RunGuard

__all__ = ["RunGuard"]
