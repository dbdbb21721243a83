"""Process groups for a hierarchy: ranks that share a fast link form a group, one leader per
group forms the group across them.

Every rank must create every group, in the same order, even the groups it is not in; the helpers
here derive the grouping from data all ranks share, so they agree by construction.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Hashable, Sequence
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


def build_hierarchy(
    key: tuple[Any, ...],
    link: str,
    backend_of: Callable[[tuple[Any, ...]], str | None] | None = None,
    inter_backend: str | None = None,
) -> Hierarchy:
    """Gather every rank's key and create the intra-group and leader process groups.

    ``backend_of(key)`` names the backend of the group of ranks with that key (None: the
    world group's), so groups of different device types can each use their own library; every
    rank asks it about every group, since every rank creates every group. ``inter_backend`` is
    the leaders' group's backend (None: the world group's)."""
    keys: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(keys, key)
    keys = [tuple(k) for k in keys]
    groups = partition_ranks(keys)
    leaders = [ranks[0] for ranks in groups]
    rank = dist.get_rank()
    intra = inter = None
    for ranks in groups:
        backend = backend_of(keys[ranks[0]]) if backend_of else None
        made = dist.new_group(ranks, backend=backend)
        if rank in ranks:
            intra, leader = made, ranks[0]
    made = dist.new_group(leaders, backend=inter_backend)
    if rank in leaders:
        inter = made
    return Hierarchy(groups, leaders, intra, inter, leader, link)
