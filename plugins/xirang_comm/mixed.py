"""``comm=mixed``: one run over devices of several types (NVIDIA, AMD, Ascend, CPU).

NCCL, RCCL and HCCL cannot reduce with each other, so the gradient exchange has two levels, as
``comm=hierarchical``'s: the ranks of one device type reduce onto their leader through that
type's own library (:func:`xirang.comm.collective_backend`: nccl, rccl, hccl, gloo), the
leaders all-reduce through gloo on a copy in host memory, and each leader broadcasts the sum
back through its type's library. The result is the plain all-reduce's sum divided by the world
size, so a balanced run's token weighting (carried by each rank's loss scale) is kept exactly;
in fp32 only the order of summation differs.

A rank's device type is the one its node resolved (``runtime.device_type``: a Slurm job's tasks
each resolve the device on their own node, so ``device=auto`` over nodes of two vendors gives
two types), else the type of the run's ``device`` option. The run's world group, which DDP uses
to broadcast the first weights, is gloo, the one library that carries every type's tensors
(CPU, CUDA, ROCm).

An option of its own rather than ``hierarchical`` grouped by type: what keys a group, each
group's library, the host staging between leaders and the world group's backend all differ,
while the three rounds (and the order they run in, on one lane) are ``hierarchical``'s code.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from xirang import ConfigError
from xirang.comm import (
    Collectives,
    Hierarchy,
    SerialLane,
    build_hierarchy,
    check_available,
    collective_backend,
)
from xirang.specs import WorkerContext
from xirang_comm.hierarchical import Hierarchical
from xirang_comm.settings import CommSettings

#: the library between the types' leaders, on host copies of the buffer
HOST_BACKEND = "gloo"


class MixedTypes(Hierarchical):
    name = "mixed"
    settings_type = CommSettings

    def backend_for(self, device_type: str) -> str:
        """The world group's backend: gloo, which every rank's tensors can travel through."""
        try:
            name = collective_backend(device_type, HOST_BACKEND)
        except ConfigError:
            raise ConfigError(
                f"comm=mixed opens the run's world group with gloo (DDP broadcasts the first "
                f"weights through it), and {device_type} tensors cannot travel through gloo. "
                f"comm=mixed serves cpu, cuda and rocm ranks"
            ) from None
        check_available(name, device_type)
        return name

    def type_backend(self, device_type: str) -> str:
        """The library the ranks of ``device_type`` reduce with: the type's own, or
        ``comm.backend`` where that type can use it (gloo everywhere, to debug)."""
        return collective_backend(device_type, self.settings.backend)

    def prepare(self, model: nn.Module, ctx: WorkerContext) -> None:
        import torch.distributed as dist

        self.refuse_sub_group()
        mine = rank_device_type(ctx)
        every: list[Any] = [None] * dist.get_world_size()
        dist.all_gather_object(every, mine)
        # every rank checks every type, so a bad one stops all ranks with the same error
        backends = {kind: self.type_backend(kind) for kind in every}
        check_available(backends[mine], mine)
        self.hierarchy: Hierarchy = build_hierarchy(
            ("type", mine), "type", lambda key: backends[key[1]], HOST_BACKEND
        )
        self.intra = Collectives(self.ledger, self.hierarchy.intra, "intra-type")
        self.inter = Collectives(self.ledger, self.hierarchy.inter, "inter-type")
        self.lane = SerialLane("xirang-mixed")
        self.types = {
            every[ranks[0]]: {
                "ranks": ranks,
                "leader": ranks[0],
                "backend": backends[every[ranks[0]]],
            }
            for ranks in self.hierarchy.groups
        }

    def across(self, buffer: torch.Tensor) -> None:
        """A leader's step: the sum over the leaders, through gloo on a host copy (the copy
        back lands on the device the buffer lives on)."""
        host = buffer.to("cpu", copy=True)
        self.inter.all_reduce(host).wait()
        buffer.copy_(host)

    def extra_report(self) -> dict[str, object]:
        if not hasattr(self, "hierarchy"):
            return {}
        return {
            "groups": self.hierarchy.groups,
            "leaders": self.hierarchy.leaders,
            "types": self.types,
            "inter_backend": HOST_BACKEND,
        }


def rank_device_type(ctx: WorkerContext) -> str:
    """This rank's device type: what its node resolved, else the run's device option's."""
    resolved = (ctx.config.get("runtime") or {}).get("device_type")
    if resolved:
        return str(resolved)
    from xirang import get_registry

    return str(get_registry().create("device", ctx.config["device"]).type)
