"""The optimizer and learning-rate schedule a run selects: ``optim.name`` and ``schedule``
name plugins (``xirang_optimizers``, ``xirang_lr_schedules``; the built-ins are in
plugins/xirang_optim). The core keeps what every optimizer shares: the parameter groups, the
kernel choice and how a checkpoint's groups are brought to this run's."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

import torch

from xirang_core.plugins import get_registry
from xirang_core.specs import LRSchedule

#: the schedule a loop uses when its settings name none (the config's default)
DEFAULT_SCHEDULE = {"name": "cosine"}


def group_params(model: torch.nn.Module) -> list[list[tuple[str, torch.nn.Parameter]]]:
    """The trainable parameters of each param group :func:`build_optimizer` makes, by name, in
    its order: weight decay applies to matrices only; norms, biases and embeddings' vectors
    are exempt. A checkpoint keys its groups by index, so an import brings another trainer's
    groups to these (``xirang ckpt import``)."""
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    return [[(n, p) for n, p in named if p.dim() >= 2], [(n, p) for n, p in named if p.dim() < 2]]


def build_optimizer(model: torch.nn.Module, optim: dict[str, Any]) -> torch.optim.Optimizer:
    """The optimizer ``optim.name`` names over :func:`group_params`' groups."""
    decayed, exempt = group_params(model)
    params = [p for _, p in decayed + exempt]
    groups = [
        {"params": [p for _, p in decayed], "weight_decay": optim["weight_decay"]},
        {"params": [p for _, p in exempt], "weight_decay": 0.0},
    ]
    impl = implementation(params)
    built = get_registry().load("optimizer", optim["name"])(groups, optim, impl)
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


def implementation(params: Sequence[torch.Tensor]) -> dict[str, bool]:
    """How the optimizer's update runs: the device's kernels (:func:`kernels`) where every
    parameter is a plain tensor, or every one a DTensor of one device mesh (FSDP2 shards:
    DTensor runs the fused op on each shard, as torchtitan's default ``fused`` does);
    ``foreach=False`` (a loop over tensors) for plain tensors beside DTensors (tensor
    parallel keeps embeddings whole) or DTensors of several meshes, which one fused or
    batched call cannot take ("got mixed torch.Tensor and DTensor"). Splitting the groups by
    kind would avoid the loop, but checkpoints key optimizer groups by index, so a run could
    no longer resume another strategy's. Each computes the single-process update's
    arithmetic, so a split run still trains like one process
    (tests/parallel/test_equivalence.py)."""
    if len({getattr(p, "device_mesh", None) for p in params}) > 1:
        return {"fused": False, "foreach": False}
    return kernels({p.device.type for p in params})


def kernels(device_types: Collection[str]) -> dict[str, bool]:
    """``fused=True`` (one kernel per group and device) on devices with fused kernels (CUDA,
    the CPU), ``foreach=True`` (batched ops) elsewhere."""
    if device_types and set(device_types) <= set(FUSED_DEVICES):
        return {"fused": True, "foreach": False}
    return {"fused": False, "foreach": True}


def build_schedule(settings: dict[str, Any] | None = None) -> LRSchedule:
    """The ``schedule`` group's choice (``settings``; the default one when None)."""
    return get_registry().create("schedule", settings or DEFAULT_SCHEDULE)
