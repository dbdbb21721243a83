"""Device health as workers and the local scheduler see it.

A device backend's ``health()`` probe returns findings; ``drain`` means the device must not run
work. Workers ask it for their own device before training and again at every checkpoint (the
moment leaving loses nothing); the local scheduler asks it for every device before each launch
and after each failure, and places workers on healthy devices only. Which device a worker uses
comes from the scheduler through :data:`DEVICES_ENV` (``"0,2,3"``: local rank i runs on the
i-th), so evicting device 1 needs no renumbering by the vendor runtime.
"""

from __future__ import annotations

import os
from typing import Any

from xirang_core.checkpoint.events import record_event
from xirang_core.errors import XirangError

#: comma-separated device indices the scheduler placed this node's workers on, by local rank
DEVICES_ENV = "XIRANG_LOCAL_DEVICES"
DRAIN = "drain"


class UnhealthyDevice(XirangError):
    """A device probe says this worker's device must be drained."""

    exit_code = 1


def local_device(local_rank: int) -> int:
    """The device index a worker with ``local_rank`` runs on."""
    placed = os.environ.get(DEVICES_ENV, "")
    indices = [int(i) for i in placed.split(",") if i.strip()]
    return indices[local_rank] if local_rank < len(indices) else local_rank


def drained(backend: Any) -> dict[int | None, str]:
    """Devices the backend's probe says to drain, with the reasons (key None: every device)."""
    found: dict[int | None, str] = {}
    for finding in backend.health():
        if finding.severity == DRAIN:
            reason = f"{finding.check}: {finding.message}"
            found[finding.device] = "; ".join(filter(None, (found.get(finding.device), reason)))
    return found


def drain_reason(backend: Any, device: int) -> str:
    """Why ``device`` must be drained, or "" when its probe finds nothing that bad."""
    found = drained(backend)
    return "; ".join(filter(None, (found.get(None, ""), found.get(device, ""))))


def check_device(backend: Any, ctx: Any, step: int | None = None) -> None:
    """Stop this worker (UnhealthyDevice) when the probe says to drain its device."""
    device = local_device(ctx.local_rank)
    reason = drain_reason(backend, device)
    if not reason:
        return
    where = "before training" if step is None else f"at step {step}"
    record_event(ctx.run_dir, "unhealthy", rank=ctx.rank, device=device, step=step, reason=reason)
    raise UnhealthyDevice(
        f"rank {ctx.rank}: device {device} ({ctx.device}) must be drained {where} ({reason}); "
        f"the scheduler restarts the run on healthy devices from the latest checkpoint"
    )
