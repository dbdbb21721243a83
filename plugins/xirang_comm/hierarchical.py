"""``comm=hierarchical``: reduce inside each fast-link group, all-reduce across the groups'
leaders, broadcast back inside each group.

Groups come from the device plugin's topology (ranks on one host whose devices share an
interconnect group), or from ``group_size`` to treat blocks of that many ranks as one node. Slow
links then carry one copy per group instead of one per rank. In fp32 the result equals the plain
all-reduce up to the order of summation.
"""

from __future__ import annotations

from typing import ClassVar

import torch
import torch.distributed as dist
from torch import nn

from xirang import ConfigError
from xirang.comm import Collectives, Hierarchy, SerialLane, build_hierarchy, link_key
from xirang.specs import WorkerContext
from xirang.worker import local_device
from xirang_comm.base import GradientSync
from xirang_comm.settings import HierarchicalSettings


class Hierarchical(GradientSync):
    name = "hierarchical"
    #: as the base declares it: ``mixed``, a subclass, takes the plain CommSettings
    settings_type: ClassVar[type] = HierarchicalSettings

    def prepare(self, model: nn.Module, ctx: WorkerContext) -> None:
        from xirang import get_registry

        self.refuse_sub_group()
        topology = get_registry().create("device", ctx.config["device"]).topology()
        device = local_device(ctx.local_rank)  # the device placed for this rank, not the rank
        key = link_key(topology, device, self.settings.group_size, ctx.rank)
        group = topology.group_of(device)
        link = "block" if self.settings.group_size else (group.link if group else "node")
        self.hierarchy: Hierarchy = build_hierarchy(key, link)
        self.intra = Collectives(self.ledger, self.hierarchy.intra, f"intra-{link}")
        self.inter = Collectives(self.ledger, self.hierarchy.inter, "inter-group")
        self.lane = SerialLane("xirang-hierarchical")

    def refuse_sub_group(self) -> None:
        """The groups span every worker: a DDP that replicates over part of a mesh cannot
        use them."""
        if self.world_size != dist.get_world_size():
            raise ConfigError(
                f"comm={self.option_name()} builds its groups over all workers, but DDP here "
                "replicates over a sub-group of the mesh. Use comm=gloo/fp16/powersgd with "
                "this strategy."
            )

    def sync(self, bucket: dist.GradBucket) -> torch.futures.Future:
        buffer = bucket.buffer()
        return self.lane.submit(lambda: self._exchange(buffer))

    def _exchange(self, buffer: torch.Tensor) -> torch.Tensor:
        """Reduce to the group leader, all-reduce across leaders, broadcast back; averaged."""
        h = self.hierarchy
        if self.intra.size > 1:
            self.intra.reduce(buffer, h.leader).wait()
        if h.inter is not None and self.inter.size > 1:
            self.across(buffer)
        if self.intra.size > 1:
            self.intra.broadcast(buffer, h.leader).wait()
        return buffer.div_(self.world_size)

    def across(self, buffer: torch.Tensor) -> None:
        """A leader's step: sum ``buffer`` in place over the leaders."""
        self.inter.all_reduce(buffer).wait()

    def extra_report(self) -> dict[str, object]:
        return {"groups": self.hierarchy.groups} if hasattr(self, "hierarchy") else {}
