"""``comm=fp16|bf16``: gradients cross the wire in 16 bits, half the bytes of fp32.

torch's ``fp16_compress_hook`` and ``bf16_compress_hook`` do the work: each bucket is cast and
divided by the world size before the all-reduce (the sum cannot overflow fp16's range that the
mean fits in), and the result is cast back into the fp32 buffer.
"""

from __future__ import annotations

from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

from xirang_comm.base import GradientSync


class Fp16(GradientSync):
    name = "fp16"
    torch_hook = staticmethod(default_hooks.fp16_compress_hook)


class Bf16(GradientSync):
    name = "bf16"
    torch_hook = staticmethod(default_hooks.bf16_compress_hook)
