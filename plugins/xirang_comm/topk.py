"""``comm=topk``: each worker sends only the largest-magnitude ``ratio`` of its gradient entries,
and keeps the rest as error feedback so that nothing is lost, only delayed.

Values (fp32) and their int32 indices travel packed in one int32 tensor through one all-gather;
every worker scatters all contributions into a dense buffer and averages. A worker sends 8 bytes
per kept entry against 4 per entry for the dense all-reduce's input, so ``ratio=0.1`` moves about
1/5 of the input bytes per worker (the all-gather's receive side grows with the worker count).
The default is 0.1: on the tiny GPT over 200 steps 0.05 ended 6% above plain all-reduce's loss
and 0.1 within 1%; 0.01 and below pay off on large models over long runs.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

from xirang_comm.base import GradientSync
from xirang_comm.settings import TopKSettings


class TopK(GradientSync):
    name = "topk"
    settings_type = TopKSettings

    def __init__(self, **settings: Any) -> None:
        super().__init__(**settings)
        self.errors: dict[int, torch.Tensor] = {}

    def sync(self, bucket: dist.GradBucket) -> torch.futures.Future:
        buffer = bucket.buffer()
        key = bucket.parameters()[0].data_ptr()
        error = self.errors.get(key)
        if error is None or error.numel() != buffer.numel():
            error = self.errors[key] = torch.zeros_like(buffer)
        packed = sparsify(buffer + error, self.settings.ratio, error)
        world = self.world_size

        def densify(fut: torch.futures.Future) -> torch.Tensor:
            values, indices = unpack(fut.value())
            buffer.zero_().index_add_(0, indices.reshape(-1), values.reshape(-1))
            return buffer.div_(world)

        return self.comm.all_gather(packed).then(densify)


def sparsify(dense: torch.Tensor, ratio: float, error: torch.Tensor) -> torch.Tensor:
    """The top ``ratio`` entries of ``dense`` packed as int32 [values' bits, indices]; what was
    not sent is written to ``error``."""
    k = max(1, int(dense.numel() * ratio))
    indices = dense.abs().topk(k, sorted=False).indices
    values = dense[indices].float()
    error.copy_(dense)
    error[indices] = 0
    return torch.cat([values.view(torch.int32), indices.to(torch.int32)])


def unpack(gathered: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Values and int64 indices from a (workers, 2k) int32 gather of :func:`sparsify` output."""
    k = gathered.shape[-1] // 2
    return gathered[:, :k].contiguous().view(torch.float32), gathered[:, k:].long()
