"""``parallel=fsdp`` on one rank applies FSDP2 for real: the one-GPU proof must exercise DTensor
parameters, the mixed-precision policy and the optimizer on DTensors, not a plain module."""

from __future__ import annotations

from pathlib import Path

import torch.distributed as dist
from torch.distributed.tensor import DTensor

from xirang_core.config import compose
from xirang_core.plugins import get_registry
from xirang_core.run import resolve_runtime
from xirang_core.train.worker import assemble, open_worker


def test_fsdp_at_world_size_one_holds_dtensor_parameters(tmp_path: Path) -> None:
    config = compose(["device=cpu", "parallel=fsdp", "tokenizer=bytes"])
    registry = get_registry()
    config = resolve_runtime(config, registry)
    ctx = open_worker(config, str(tmp_path), registry)
    try:
        parts = assemble(config, ctx, registry)
        kinds = {type(p).__name__ for p in parts.model.parameters()}
        assert kinds == {DTensor.__name__}
        assert all(
            isinstance(p, DTensor) for g in parts.optimizer.param_groups for p in g["params"]
        )
    finally:
        dist.destroy_process_group()
