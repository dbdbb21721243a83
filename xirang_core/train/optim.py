"""Optimizer and learning-rate schedule (linear warm-up, cosine decay to ``min_lr``)."""

from __future__ import annotations

import math
from typing import Any

import torch

from xirang_core.config import OPTIMIZERS
from xirang_core.errors import ConfigError


def build_optimizer(model: torch.nn.Module, optim: dict[str, Any]) -> torch.optim.Optimizer:
    """Weight decay applies to matrices only; norms, biases and embeddings' vectors are exempt."""
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [
        {"params": [p for p in params if p.dim() >= 2], "weight_decay": optim["weight_decay"]},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
    ]
    impl = implementation(params)
    if optim["name"] == "adamw":
        built: torch.optim.Optimizer = torch.optim.AdamW(
            groups, lr=optim["lr"], betas=(optim["beta1"], optim["beta2"]), **impl
        )
    elif optim["name"] == "sgd":
        built = torch.optim.SGD(groups, lr=optim["lr"], momentum=optim["beta1"], **impl)
    else:
        raise ConfigError(
            f"optim.name={optim['name']!r}: valid optimizers are {', '.join(OPTIMIZERS)}"
        )
    # a checkpoint's param groups carry the saving run's choice, made for its own split
    built.register_load_state_dict_post_hook(lambda opt: _choose(opt, impl))
    return built


def _choose(optimizer: torch.optim.Optimizer, impl: dict[str, bool]) -> None:
    """This run's kernels for every group; fused kernels take their step counts on the
    parameters' device (another kernel's checkpoint keeps them on the CPU)."""
    for group in optimizer.param_groups:
        group.update(impl)
    if impl["fused"]:
        for param, state in optimizer.state.items():
            if torch.is_tensor(state.get("step")):
                state["step"] = state["step"].to(param.device, torch.float32)


#: device types whose fused optimizer kernels xirang uses
FUSED_DEVICES = ("cuda", "cpu")


def implementation(params: list[torch.Tensor]) -> dict[str, bool]:
    """How the optimizer's update runs, by what the parameters are:

    - ``fused=True`` (one kernel over all parameters) where every one is a plain tensor on a
      device with fused kernels (CUDA, the CPU);
    - ``foreach=True`` (batched ops) where every one is a DTensor of one device mesh (FSDP2
      shards, as torchtitan runs them);
    - ``foreach=False`` (a loop over tensors) for a mix of DTensors and plain tensors (tensor
      parallel keeps embeddings whole), which batched ops cannot take in one list.

    Each computes the single-process update's arithmetic, so a split run still trains like one
    process (tests/parallel/test_equivalence.py)."""
    from torch.distributed.tensor import DTensor

    split = [p for p in params if isinstance(p, DTensor)]
    if params and not split and all(p.device.type in FUSED_DEVICES for p in params):
        return {"fused": True, "foreach": False}
    if params and len(split) == len(params) and len({p.device_mesh for p in split}) == 1:
        return {"fused": False, "foreach": True}
    return {"fused": False, "foreach": False}


def lr_at(step: int, max_steps: int, optim: dict[str, Any]) -> float:
    """Learning rate for a 1-based ``step``."""
    lr, min_lr, warmup = optim["lr"], optim["min_lr"], optim["warmup_steps"]
    if step <= warmup:
        return lr * step / max(warmup, 1)
    progress = (step - warmup) / max(max_steps - warmup, 1)
    return min_lr + 0.5 * (lr - min_lr) * (1 + math.cos(math.pi * min(progress, 1.0)))
