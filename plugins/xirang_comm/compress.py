"""``comm=fp16|bf16``: gradients cross the wire in 16 bits, half the bytes of fp32.

Each bucket is divided by the world size before the cast, so the sum cannot overflow fp16's
range that the mean fits in; the result is cast back into the fp32 buffer.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from xirang_comm.base import GradientSync


class HalfPrecision(GradientSync):
    wire_dtype: torch.dtype = torch.float16

    def sync(self, bucket: dist.GradBucket) -> torch.futures.Future:
        buffer = bucket.buffer()
        wire = buffer.to(self.wire_dtype).div_(self.world_size)

        def unpack(fut: torch.futures.Future) -> torch.Tensor:
            return buffer.copy_(fut.value())

        return self.comm.all_reduce(wire).then(unpack)


class Fp16(HalfPrecision):
    name = "fp16"
    wire_dtype = torch.float16


class Bf16(HalfPrecision):
    name = "bf16"
    wire_dtype = torch.bfloat16
