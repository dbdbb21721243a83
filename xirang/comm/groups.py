"""Process groups for a hierarchy: ranks that share a fast link form a group, one leader per
group forms the group across them.

Every rank must create every group, in the same order, even the groups it is not in; the helpers
here derive the grouping from data all ranks share, so they agree by construction.
"""

from __future__ import annotations

import socket
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any

import torch.distributed as dist

from xirang_core.specs import Topology


def partition_ranks(keys: Sequence[Hashable]) -> list[list[int]]:
    """Ranks grouped by equal key (``keys[rank]``), groups ordered by their lowest rank."""
    groups: dict[Hashable, list[int]] = {}
    for rank, key in enumerate(keys):
        groups.setdefault(key, []).append(rank)
    return sorted(groups.values(), key=lambda ranks: ranks[0])


def link_key(topology: Topology, local_rank: int, group_size: int, rank: int) -> tuple[Any, ...]:
    """What decides this rank's group: a fixed ``group_size`` when given (an emulated node of
    that many ranks), else this host and the topology group of the rank's device."""
    if group_size > 0:
        return ("block", rank // group_size)
    group = topology.group_of(local_rank) or topology.group_of(0)
    return (socket.gethostname(), group.name if group else "host")


@dataclass
class Hierarchy:
    """This rank's place in a two-level hierarchy of process groups."""

    groups: list[list[int]]
    leaders: list[int]
    intra: Any  # the process group of this rank's own group
    inter: Any  # the process group of the leaders, or None on non-leaders
    leader: int  # the global rank leading this rank's group
    link: str  # the name of the fast level, for reports


def build_hierarchy(key: tuple[Any, ...], link: str) -> Hierarchy:
    """Gather every rank's key and create the intra-group and leader process groups."""
    keys: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(keys, key)
    groups = partition_ranks([tuple(k) for k in keys])
    leaders = [ranks[0] for ranks in groups]
    rank = dist.get_rank()
    intra = inter = None
    for ranks in groups:
        made = dist.new_group(ranks)
        if rank in ranks:
            intra, leader = made, ranks[0]
    made = dist.new_group(leaders)
    if rank in leaders:
        inter = made
    return Hierarchy(groups, leaders, intra, inter, leader, link)
