"""``comm=powersgd``: rank-r low-rank gradient compression with error feedback (Vogels et al.,
2019), run by torch's ``powerSGD_hook``.

Each gradient matrix M (n x m) is approximated as P Q^T: P = M Q and Q = M^T P are averaged over
the workers, and the part of each bucket the approximation missed is kept as error for the next
step. The wire carries (n + m) r numbers per matrix instead of n m; vectors, and matrices too
small to gain, are all-reduced uncompressed. With ``warm_start`` the Q of the last step seeds the
next, which is what lets rank 1-4 work.

torch's hook issues later rounds (P, then Q) from completion callbacks, so two buckets in flight
could reach the network in different orders on different ranks. Each bucket's whole exchange
therefore runs on one :class:`SerialLane`, buckets in the order DDP hands them over.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks.powerSGD_hook import PowerSGDState, powerSGD_hook

from xirang.comm import SerialLane
from xirang.specs import WorkerContext
from xirang_comm.base import GradientSync
from xirang_comm.settings import PowerSGDSettings

#: compress a matrix when (n + m) r < n m: any saving counts (torch's default asks for 2x)
MIN_COMPRESSION_RATE = 1.0


class PowerSGD(GradientSync):
    name = "powersgd"
    settings_type = PowerSGDSettings
    torch_hook = staticmethod(powerSGD_hook)

    def __init__(self, **settings: Any) -> None:
        super().__init__(**settings)
        self.lane = SerialLane("xirang-powersgd")
        self.compressed_calls = 0

    def prepare(self, model: nn.Module, ctx: WorkerContext) -> None:
        """torch's PowerSGD state, on the counted group."""
        s = self.settings
        self.state = PowerSGDState(
            process_group=self.group,
            matrix_approximation_rank=s.rank,
            start_powerSGD_iter=s.start_iter,
            min_compression_rate=MIN_COMPRESSION_RATE,
            use_error_feedback=True,
            warm_start=s.warm_start,
            random_seed=s.seed,
        )

    def hook_state(self) -> PowerSGDState:
        return self.state

    def sync(self, bucket: dist.GradBucket) -> torch.futures.Future:
        """torch's hook for this bucket, all its rounds, on the serial lane."""
        return self.lane.submit(lambda: self._exchange(bucket))

    def _exchange(self, bucket: dist.GradBucket) -> torch.Tensor:
        if self.state.iter >= self.state.start_powerSGD_iter:
            self.compressed_calls += 1
        return self.torch_hook(self.state, bucket).wait()

    def extra_report(self) -> dict[str, Any]:
        return {"rank": self.settings.rank, "compressed_buckets": self.compressed_calls}
