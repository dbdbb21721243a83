"""What every ``comm=`` option shares: the collective backend it opens, the DDP comm hook it
installs (counted collectives, overlap measurement, sync windows) and its report.

Where torch ships the exchange (``torch.distributed.algorithms.ddp_comm_hooks``), the option
runs torch's hook on a :class:`CountedGroup`: torch does the arithmetic, xirang counts the bytes
of each all-reduce it issues and times the bucket.

This module avoids ``from __future__ import annotations``: DDP inspects the hook's ``bucket``
annotation and accepts only the real ``dist.GradBucket`` class there.
"""

from collections.abc import Callable
from typing import Any, ClassVar

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel

from xirang import ConfigError
from xirang.comm import (
    Collectives,
    CountedGroup,
    OverlapMeter,
    SyncWindow,
    WireLedger,
    check_available,
    collective_backend,
)
from xirang.specs import CommBackendBase, WorkerContext
from xirang_comm.settings import CommSettings

#: a DDP comm hook as torch defines them: (state, bucket) -> future of the reduced buffer
TorchHook = Callable[[Any, dist.GradBucket], torch.futures.Future]


class GradientSync(CommBackendBase):
    """Each DDP bucket through torch's ``torch_hook``: averaged all-reduce unless a subclass
    names another torch hook (and its state) or changes :meth:`sync`."""

    settings_type: ClassVar[type] = CommSettings
    #: a backend this option always uses (comm=nccl), or None to follow the device
    pinned_backend: ClassVar[str | None] = None
    #: device types this option may serve; empty = any
    device_types: ClassVar[tuple[str, ...]] = ()
    #: torch's DDP comm hook this option runs on each bucket
    torch_hook: TorchHook = staticmethod(default_hooks.allreduce_hook)

    def __init__(self, **settings: Any) -> None:
        self.settings = self.settings_type(**settings)
        self.settings.check()  # checked when composed; again for one built in code
        self.ledger = WireLedger()
        self.overlap = OverlapMeter()
        self.window: SyncWindow | None = None
        self.window_wait_s = 0.0
        self.world_size = 1
        self.comm = Collectives(self.ledger)
        self.group = CountedGroup(self.comm)

    # --- the CommBackend protocol -------------------------------------------------------------

    def backend_for(self, device_type: str) -> str:
        """The backend to open for ``device_type``; refuses one the device cannot use."""
        if self.device_types and device_type not in self.device_types:
            raise ConfigError(
                f"comm={self.option_name()} serves {', '.join(self.device_types)} devices, not "
                f"{device_type}. Use comm=auto or an option without a pinned backend "
                f"(fp16, bf16, powersgd, topk, hierarchical, localsgd, diloco)"
            )
        name = collective_backend(device_type, self.pinned_backend or self.settings.backend)
        check_available(name, device_type)
        return name

    def install_hooks(self, model: nn.Module, ctx: WorkerContext) -> None:
        """Register this option's gradient hook on a DDP-wrapped model (nothing for one worker)."""
        self.world_size = ctx.world_size
        if ctx.world_size == 1:
            return
        if not isinstance(model, DistributedDataParallel):
            raise ConfigError(
                f"comm={self.option_name()} syncs gradients through a DDP comm hook; the "
                f"parallel strategy wrapped the model in {type(model).__name__}, which takes "
                f"none. Use parallel=ddp, or comm=auto for this strategy."
            )
        # DDP may replicate over a sub-group of a larger mesh: average over that group only
        group = model.process_group
        self.world_size = dist.get_world_size(group)
        self.comm = Collectives(self.ledger, group)
        self.group = CountedGroup(self.comm)
        self.overlap = OverlapMeter(self.comm.clock)  # device events on NCCL/RCCL/HCCL
        self.window = self.resolve_window(ctx)
        self.prepare(model, ctx)
        model.register_comm_hook(state=None, hook=self._hook)

    # --- what subclasses change ---------------------------------------------------------------

    def prepare(self, model: nn.Module, ctx: WorkerContext) -> None:
        """Set up groups or state before the first backward; plain all-reduce needs none."""

    def hook_state(self) -> Any:
        """The state ``torch_hook`` takes; torch's stateless hooks take the process group."""
        return self.group

    def sync(self, bucket: dist.GradBucket) -> torch.futures.Future:
        """Average one bucket over the workers; resolves to the averaged flat buffer."""
        return self.torch_hook(self.hook_state(), bucket)

    def extra_report(self) -> dict[str, Any]:
        """Option-specific figures for the run summary."""
        return {}

    # --- shared machinery ---------------------------------------------------------------------

    def report(self, steps: int) -> dict[str, Any]:
        """This rank's communication figures for the run summary."""
        return {
            "option": self.option_name(),
            **self.ledger.report(steps),
            "overlap": self.overlap.report(),
            "sync_window_wait_s": round(self.window_wait_s, 4),
            **self.extra_report(),
        }

    def resolve_window(self, ctx: WorkerContext) -> SyncWindow | None:
        """A scheduler's window (``xirang_comm_sync_window`` hook) wins over the config's."""
        from xirang import get_registry

        assigned = get_registry().hook.xirang_comm_sync_window(ctx=ctx, config=ctx.config)
        if assigned is not None:
            return assigned
        s = self.settings
        if s.sync_period_ms <= 0:
            return None
        return SyncWindow(s.sync_period_ms / 1000, s.sync_slot, s.sync_slots)

    def option_name(self) -> str:
        return getattr(self, "name", type(self).__name__.lower())

    def _hook(self, state: object, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
        if self.window is not None and bucket.index() == 0:
            self.window_wait_s += self.window.wait()
        return self.overlap.track(self.sync(bucket), bucket.is_last())
