"""Nodes, devices and interconnect groups, with the free-device indices placement needs.

Every node sits in a tree of interconnect groups: devices share an NVLink/HCCS *domain* inside a
node, nodes share a *leaf* switch, leaves share a *spine*. Devices are global integer ids so the
same placement can be stored, compared and handed to any executor. The indices (free devices per
node, nodes bucketed by free count, free count per leaf and spine) are kept incrementally so a
scheduling pass over thousands of devices costs microseconds per job, not a scan of the cluster.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

from xirang_service.pool.errors import PoolError


@dataclass
class Node:
    """One machine: ``size`` devices of one ``type`` in NVLink domains of ``domain_size``."""

    id: int
    name: str
    type: str
    size: int
    leaf: str
    spine: str
    domain_size: int
    first_device: int
    healthy: bool = True
    free: set[int] = field(default_factory=set)

    @property
    def devices(self) -> range:
        return range(self.first_device, self.first_device + self.size)

    def domain_of(self, device: int) -> int:
        return (device - self.first_device) // max(1, self.domain_size)


#: :attr:`Inventory.device_node` of a device id no node holds (its node's row was set aside)
HOLE = -1


class Inventory:
    """The pool's hardware and which devices are free; healthy nodes only are placeable.

    Device ids are numbered node after node; a node spec may give its ``first_device`` (a
    restart, whose stored ids must stay), leaving ids no node holds (:data:`HOLE`) before it."""

    def __init__(self, nodes: Iterable[dict]) -> None:
        self.nodes: list[Node] = []
        self.by_name: dict[str, Node] = {}
        self.device_node: list[int] = []
        for spec in nodes:
            self._add(spec)
        if not self.nodes:
            raise PoolError("the cluster has no nodes; list at least one under 'nodes'")
        self.types = sorted({n.type for n in self.nodes})
        self.max_size = {t: max(n.size for n in self.nodes if n.type == t) for t in self.types}
        self.total = {t: sum(n.size for n in self.nodes if n.type == t) for t in self.types}
        self._buckets: dict[str, list[set[int]]] = {}
        self.type_free: dict[str, int] = {}
        self.total_free = 0
        self.stranded = 0
        self.leaf_free: dict[tuple[str, str], int] = defaultdict(int)
        self.spine_free: dict[tuple[str, str], int] = defaultdict(int)
        self.reindex()

    # --- construction -----------------------------------------------------------------------

    def _add(self, spec: dict) -> None:
        name = str(spec.get("name") or f"node{len(self.nodes)}")
        if name in self.by_name:
            raise PoolError(f"node '{name}' is listed twice in the cluster")
        size = int(spec.get("devices", 0))
        if size <= 0:
            raise PoolError(f"node '{name}': 'devices' must be a positive count, got {size}")
        first = int(spec.get("first_device", len(self.device_node)))
        if first < len(self.device_node):
            raise PoolError(f"node '{name}': its devices from {first} overlap another node's")
        self.device_node.extend([HOLE] * (first - len(self.device_node)))
        node = Node(
            id=len(self.nodes),
            name=name,
            type=str(spec.get("type") or "cpu"),
            size=size,
            leaf=str(spec.get("leaf") or "leaf0"),
            spine=str(spec.get("spine") or "spine0"),
            domain_size=int(spec.get("domain_size") or size),
            first_device=len(self.device_node),
            healthy=bool(spec.get("healthy", True)),
        )
        node.free = set(node.devices)
        self.nodes.append(node)
        self.by_name[name] = node
        self.device_node.extend([node.id] * size)

    def reindex(self) -> None:
        """Rebuild every free index from the nodes' free sets (after load or bulk edits)."""
        self._buckets = {t: [set() for _ in range(self.max_size[t] + 1)] for t in self.types}
        self.type_free = dict.fromkeys(self.types, 0)
        self.total_free = 0
        self.stranded = sum(self._stranded(n) for n in self.nodes)
        self.leaf_free.clear()
        self.spine_free.clear()
        for node in self.nodes:
            if node.healthy:
                self._count(node, len(node.free))
                self._buckets[node.type][len(node.free)].add(node.id)

    @staticmethod
    def _stranded(node: Node) -> int:
        """Free devices of a healthy, partly used node: what fragmentation counts."""
        free = len(node.free)
        return free if node.healthy and 0 < free < node.size else 0

    def _count(self, node: Node, delta: int) -> None:
        self.total_free += delta
        self.type_free[node.type] += delta
        self.leaf_free[(node.type, node.leaf)] += delta
        self.spine_free[(node.type, node.spine)] += delta

    # --- queries ----------------------------------------------------------------------------

    @property
    def size(self) -> int:
        return sum(n.size for n in self.nodes)

    def capacity(self, device_type: str, healthy_only: bool = True) -> int:
        """Devices of ``device_type``: healthy ones, or all (healthy or drained)."""
        if not healthy_only:
            return self.total.get(device_type, 0)
        return sum(
            n.size for n in self.nodes if n.type == device_type and (n.healthy or not healthy_only)
        )

    def node(self, name: str) -> Node:
        try:
            return self.by_name[name]
        except KeyError:
            raise PoolError(
                f"unknown node '{name}'; nodes: {', '.join(sorted(self.by_name)[:20])}", 404
            ) from None

    def node_of(self, device: int) -> Node:
        index = self.device_node[device]
        if index == HOLE:
            raise PoolError(f"device {device} is on no node of this pool (its node was set aside)")
        return self.nodes[index]

    def device_type(self, device: int) -> str:
        return self.node_of(device).type

    def nodes_with_free(self, device_type: str, at_least: int) -> Iterable[int]:
        """Node ids of ``device_type`` with at least ``at_least`` free devices, tightest first."""
        buckets = self._buckets[device_type]
        for count in range(max(1, at_least), len(buckets)):
            yield from sorted(buckets[count])

    def tightest_node(self, device_type: str, at_least: int) -> int | None:
        """The first of :meth:`nodes_with_free` (None when no node has room), without sorting
        a bucket that may hold hundreds of nodes: what a single-node placement asks for."""
        buckets = self._buckets[device_type]
        for count in range(max(1, at_least), len(buckets)):
            if buckets[count]:
                return min(buckets[count])
        return None

    def fragmentation(self) -> float:
        """Share of free healthy devices stranded on partly used nodes (0 = none stranded)."""
        return self.stranded / self.total_free if self.total_free else 0.0

    def free_devices(self) -> int:
        return self.total_free

    # --- mutation ---------------------------------------------------------------------------

    def take(self, devices: Iterable[int]) -> None:
        """Mark ``devices`` used; each must be free (a device is never given twice)."""
        groups = self._by_node(devices)
        for node, ids in groups:
            busy = [d for d in ids if d not in node.free] or ids[len(set(ids)) :]
            if busy:
                raise AssertionError(f"device {busy[0]} on {node.name} is not free")
        for node, ids in groups:
            self._resize(node, ids, taken=True)

    def release(self, devices: Iterable[int]) -> None:
        for node, ids in self._by_node(devices):
            self._resize(node, ids, taken=False)

    def _by_node(self, devices: Iterable[int]) -> list[tuple[Node, list[int]]]:
        """``devices`` grouped by node (a gang mostly sits on one or a few), in first-seen
        order, so each node's indices are updated once per gang rather than per device."""
        groups: dict[int, tuple[Node, list[int]]] = {}
        for device in devices:
            node = self.node_of(device)
            if node.id in groups:
                groups[node.id][1].append(device)
            else:
                groups[node.id] = (node, [device])
        return list(groups.values())

    def _resize(self, node: Node, devices: list[int], taken: bool) -> None:
        """Take or free ``devices`` of ``node``, keeping the indices in step."""
        before = len(node.free)
        self.stranded -= self._stranded(node)
        if taken:
            node.free.difference_update(devices)
        else:
            node.free.update(devices)
        self.stranded += self._stranded(node)
        if not node.healthy:
            return
        self._buckets[node.type][before].discard(node.id)
        self._count(node, len(node.free) - before)
        self._buckets[node.type][len(node.free)].add(node.id)

    def set_health(self, name: str, healthy: bool) -> Node:
        """Drain (unhealthy) or restore a node; a drained node's devices are never placed."""
        node = self.node(name)
        if node.healthy == healthy:
            return node
        count = len(node.free)
        self.stranded -= self._stranded(node)
        self._set_healthy(node, healthy, count)
        self.stranded += self._stranded(node)
        return node

    def _set_healthy(self, node: Node, healthy: bool, count: int) -> None:
        """Flip a node's health, moving its free devices into or out of the indices."""
        if healthy:
            node.healthy = True
            self._count(node, count)
            self._buckets[node.type][count].add(node.id)
        else:
            self._buckets[node.type][count].discard(node.id)
            self._count(node, -count)
            node.healthy = False
