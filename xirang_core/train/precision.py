"""``trainer.precision=fp32|bf16|fp16``: what forward computes in; master weights stay fp32.

- bf16/fp16: ``torch.autocast`` around forward and loss (matmuls in 16 bits, softmax, norms
  and the loss in fp32), for every strategy. Under FSDP2 the sharding also casts parameters
  to 16 bits once per gather and reduces gradients in fp32 (:func:`fsdp_policy`, as torchtitan
  does); autocast stays on there too, because a family's loss is computed inside its forward
  and autocast is what keeps that cross-entropy in fp32.
- fp16: a ``GradScaler`` scales the loss before backward and unscales before clipping; a step
  whose gradients overflowed is skipped and the scale lowered.
- fp32 on CUDA: TF32 matmuls (``set_float32_matmul_precision('high')``), as torchtitan does.

Parameters, optimizer state and checkpoints keep their fp32 dtype in every mode.
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch

from xirang_core.config import PRECISIONS


class Precision:
    """One worker's precision: its autocast context and, for fp16, its gradient scaler."""

    def __init__(self, name: str, device: torch.device) -> None:
        self.name, self.device_type = name, device.type
        self.dtype = getattr(torch, PRECISIONS[name])
        self.scaler = torch.amp.GradScaler(device.type) if name == "fp16" else None
        if name == "fp32" and device.type == "cuda":
            torch.backends.cuda.matmul.allow_tf32 = True
            torch.backends.cudnn.allow_tf32 = True
            torch.set_float32_matmul_precision("high")

    def autocast(self) -> contextlib.AbstractContextManager:
        """Forward (and the loss) in this precision; nothing for fp32."""
        if self.dtype == torch.float32:
            return contextlib.nullcontext()
        return torch.autocast(self.device_type, dtype=self.dtype)


def fsdp_policy(name: str) -> Any:
    """FSDP2's ``MixedPrecisionPolicy`` for ``trainer.precision``: 16-bit parameters in compute
    and fp32 gradient reduction; None for fp32."""
    if name == "fp32":
        return None
    from torch.distributed.fsdp import MixedPrecisionPolicy

    dtype = getattr(torch, PRECISIONS[name])
    return MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=torch.float32)
