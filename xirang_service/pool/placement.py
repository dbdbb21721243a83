"""Topology- and fragmentation-aware placement of one gang of devices.

A job's replicas go to the fewest, closest interconnect groups: one NVLink domain if it fits,
else one node, else one leaf switch, else one spine, else across spines. At every level the
tightest group that still fits is chosen (best fit), so large free blocks stay whole for the
large jobs that need them; inside the chosen group the fullest members are used first, so a gang
spans as few nodes as possible. Placement is all or nothing (gang admission).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import TYPE_CHECKING

from xirang_service.pool.cluster import Inventory, Node

if TYPE_CHECKING:
    from xirang_service.pool.cards import Throughputs


def place(cluster: Inventory, device_type: str, count: int) -> list[int] | None:
    """``count`` free healthy devices of ``device_type`` as close together as possible."""
    if count <= 0 or cluster.type_free.get(device_type, 0) < count:
        return None
    if count <= cluster.max_size[device_type]:
        node_id = cluster.tightest_node(device_type, count)
        if node_id is not None:
            return _within_node(cluster.nodes[node_id], count)
    for level, index in (("leaf", cluster.leaf_free), ("spine", cluster.spine_free)):
        group = _tightest(index, device_type, count)
        if group is not None:
            return _across(_members(cluster, device_type, level, group), count)
    return _across(_members(cluster, device_type, None, None), count)


def place_mixed(
    cluster: Inventory, throughputs: Throughputs, job_class: str, cards: int, types: list[str]
) -> list[tuple[str, list[int]]] | None:
    """``cards`` logical cards from free devices of several types, for a job that allows
    mixing: the preferred types first, each device counting for its type's throughput on
    ``job_class`` (a device twice as fast as the reference is two cards), each type's share
    placed topology-aware as above. All or nothing; None when the free devices fall short."""
    plan: list[tuple[str, int]] = []
    left = float(cards)
    for device_type in types:
        rel = throughputs.relative(job_class, device_type)
        eligible = throughputs.devices_for(job_class, 1, device_type) is not None
        free = cluster.type_free.get(device_type, 0)
        if left <= 1e-9 or not eligible or free == 0:
            continue
        take = min(free, max(1, math.ceil(left / rel - 1e-9)))
        plan.append((device_type, take))
        left -= take * rel
    if left > 1e-9:
        return None
    return [(t, place(cluster, t, n) or []) for t, n in plan]


def _tightest(index: dict[tuple[str, str], int], device_type: str, count: int) -> str | None:
    """The group of ``device_type`` with the fewest free devices that still holds ``count``."""
    fits = [(free, name) for (t, name), free in index.items() if t == device_type and free >= count]
    return min(fits)[1] if fits else None


def _members(
    cluster: Inventory, device_type: str, level: str | None, group: str | None
) -> list[Node]:
    """Healthy nodes of ``device_type`` with free devices (in ``group`` of ``level``): read
    from the free-count buckets, which hold no full or drained node (callers sort them)."""
    nodes = (cluster.nodes[i] for i in cluster.nodes_with_free(device_type, 1))
    return [n for n in nodes if level is None or getattr(n, level) == group]


def _across(nodes: Iterable[Node], count: int) -> list[int]:
    """Fill from the nodes with the most free devices first: the fewest nodes for the gang."""
    chosen: list[int] = []
    ranked = sorted(nodes, key=lambda n: (-len(n.free), n.leaf, n.id))
    for node in ranked:
        take = min(count - len(chosen), len(node.free))
        chosen.extend(_within_node(node, take))
        if len(chosen) == count:
            return chosen
    raise AssertionError("free-device index disagrees with the nodes")  # indices are exact


def _within_node(node: Node, count: int) -> list[int]:
    """``count`` free devices of ``node``, from the tightest NVLink domain that fits."""
    domains: dict[int, list[int]] = {}
    for device in sorted(node.free):
        domains.setdefault(node.domain_of(device), []).append(device)
    fitting = [d for d in domains.values() if len(d) >= count]
    if fitting:
        return min(fitting, key=len)[:count]
    chosen: list[int] = []
    for devices in sorted(domains.values(), key=len, reverse=True):
        chosen.extend(devices[: count - len(chosen)])
        if len(chosen) == count:
            break
    return chosen


def span(cluster: Inventory, devices: Iterable[int]) -> dict[str, int]:
    """How many nodes, leaves and spines a placement touches (1/1/1 is ideal)."""
    nodes = [cluster.nodes[i] for i in {cluster.device_node[d] for d in devices}]
    return {
        "nodes": len(nodes),
        "leaves": len({n.leaf for n in nodes}),
        "spines": len({n.spine for n in nodes}),
    }
