"""``comm=hierarchical``: reduce inside each fast-link group, all-reduce across the groups'
leaders, broadcast back inside each group.

Groups come from the device plugin's topology (ranks on one host whose devices share an
interconnect group), or from ``group_size`` to treat blocks of that many ranks as one node. Slow
links then carry one copy per group instead of one per rank. In fp32 the result equals the plain
all-reduce up to the order of summation.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn

from xirang_comm.base import CommSettings, GradientSync, completed
from xirang_core.comm.counting import Collectives
from xirang_core.comm.groups import Hierarchy, build_hierarchy, link_key
from xirang_core.specs import WorkerContext


@dataclass
class HierarchicalSettings(CommSettings):
    """``group_size``: ranks per group; 0 takes the groups from the device topology."""

    group_size: int = 0


class Hierarchical(GradientSync):
    name = "hierarchical"
    settings_type = HierarchicalSettings

    def prepare(self, model: nn.Module, ctx: WorkerContext) -> None:
        from xirang_core.plugins import get_registry

        topology = get_registry().create("device", ctx.config["device"]).topology()
        key = link_key(topology, ctx.local_rank, self.settings.group_size, ctx.rank)
        group = topology.group_of(ctx.local_rank)
        link = "block" if self.settings.group_size else (group.link if group else "node")
        self.hierarchy: Hierarchy = build_hierarchy(key, link)
        self.intra = Collectives(self.ledger, self.hierarchy.intra, f"intra-{link}")
        self.inter = Collectives(self.ledger, self.hierarchy.inter, "inter-group")

    def sync(self, bucket: dist.GradBucket) -> torch.futures.Future:
        buffer, h, world = bucket.buffer(), self.hierarchy, self.world_size
        single = self.intra.size == 1

        def across(fut: torch.futures.Future) -> torch.Tensor:
            if h.inter is not None and self.inter.size > 1:
                self.inter.all_reduce(buffer).wait()
            return buffer

        def back(fut: torch.futures.Future) -> torch.Tensor:
            if not single:
                self.intra.broadcast(fut.value(), h.leader).wait()
            return buffer.div_(world)

        first = completed(buffer) if single else self.intra.reduce(buffer, h.leader)
        return first.then(across).then(back)

    def extra_report(self) -> dict[str, object]:
        return {"groups": self.hierarchy.groups} if hasattr(self, "hierarchy") else {}
