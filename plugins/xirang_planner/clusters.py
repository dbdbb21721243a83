"""Clusters that are not here (DGX A100, H100, MI300X, Ascend 910B, ...), described in the
``cluster`` option files of this plugin's ``conf/`` and of any other plugin's, for ``xirang
plan cluster=<name>``.

A mixed cluster joins several of them, one per device type: a file with ``groups`` (each a
cluster option and its node count) and the link between types, or on the command line
``cluster=dgx_h100:1+dgx_a100_80gb:2`` (option:nodes, joined by ``+``)."""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

import yaml

from xirang import ConfigError, get_registry
from xirang.planning import ClusterShape


def cluster_folders() -> list[Path]:
    """Where ``cluster`` options live: each plugin's config folder (this one's among them)."""
    paths = get_registry().config_search_paths()
    folders = [
        Path(p.removeprefix("file://")) / "cluster" for p in paths if p.startswith("file://")
    ]
    return [f for f in folders if f.is_dir()]


def cluster_names() -> list[str]:
    return sorted({p.stem for folder in cluster_folders() for p in folder.glob("*.yaml")})


#: GB/s per device between device types when the file names none: vendors' collective
#: libraries (NCCL, RCCL, HCCL) do not reach each other, so the traffic is staged through host
#: memory and the nodes' Ethernet/RoCE NICs
CROSS_GBPS = 10.0
CROSS_LATENCY_US = 30.0


@dataclass(frozen=True)
class MixedCluster:
    """Devices of several types: one homogeneous :class:`ClusterShape` per type (its own nodes,
    links, memory and rate), and the link between types."""

    name: str
    groups: tuple[ClusterShape, ...]
    cross_gbps: float = CROSS_GBPS  # GB/s per device between types (host-staged)
    cross_latency_us: float = CROSS_LATENCY_US

    @property
    def devices(self) -> int:
        return sum(g.devices for g in self.groups)

    def describe(self) -> str:
        """``8 H100-SXM5-80GB + 16 A100-SXM4-80GB``: what the planner's first line names."""
        return " + ".join(f"{g.devices} {g.device}" for g in self.groups)


def load_cluster(name: str, **overrides: Any) -> ClusterShape | MixedCluster:
    """A described cluster by option name; ``overrides`` (e.g. ``nodes=4``) replace fields.
    ``a:1+b:2`` (or a file with ``groups``) is a mixed cluster of options ``a`` and ``b``."""
    if "+" in name or ":" in name:
        groups = [_group(part, name) for part in name.split("+")]
        return _mixed(name, groups, {}, overrides)
    data = _cluster_file(name)
    if "groups" in data:
        groups = [_group_entry(entry, name) for entry in data.pop("groups") or []]
        return _mixed(data.pop("name", name), groups, data, overrides)
    return with_overrides(ClusterShape(**data), overrides)


def _cluster_file(name: str) -> dict[str, Any]:
    for folder in cluster_folders():
        path = folder / f"{name}.yaml"
        if path.exists():
            return dict(yaml.safe_load(path.read_text()))
    raise ConfigError(
        f"cluster={name}: no such cluster. Valid: local, {', '.join(cluster_names())}, or a "
        f"mixed one as option:nodes joined by + (e.g. cluster=dgx_h100:1+dgx_a100_80gb:2)"
    )


def _group(part: str, whole: str) -> ClusterShape:
    """One device type of a mixed cluster from ``option:nodes`` (nodes default 1)."""
    option, _, nodes = part.partition(":")
    if not option or (nodes and not nodes.isdigit()) or nodes == "0":
        raise ConfigError(
            f"'{part}' in cluster={whole} is not option:nodes; give each device type as a "
            f"cluster option and its node count, e.g. cluster=dgx_h100:1+dgx_a100_80gb:2"
        )
    return _homogeneous(option, {"nodes": int(nodes or 1)}, whole)


def _group_entry(entry: Any, whole: str) -> ClusterShape:
    """One device type of a mixed cluster file: ``{cluster: <option>, nodes: N, ...}``, any
    other key a field of that option replaced."""
    if not isinstance(entry, dict) or "cluster" not in entry:
        raise ConfigError(
            f"cluster={whole}: each of its groups needs 'cluster' (a cluster option) and may "
            f"give 'nodes' or any field to replace; got {entry!r}"
        )
    option = entry["cluster"]
    return _homogeneous(option, {k: v for k, v in entry.items() if k != "cluster"}, whole)


def _homogeneous(option: str, overrides: dict[str, Any], whole: str) -> ClusterShape:
    found = load_cluster(option, **overrides)
    if isinstance(found, MixedCluster):
        raise ConfigError(f"cluster={whole}: group '{option}' is itself a mixed cluster")
    return found


def _mixed(
    name: str, groups: list[ClusterShape], data: dict[str, Any], overrides: dict[str, Any]
) -> MixedCluster:
    """A mixed cluster from its groups; the file's and the command line's cross-type link."""
    links = {**data, **overrides}
    known = {"cross_gbps", "cross_latency_us"}
    bad = sorted(set(links) - known)
    if bad:
        raise ConfigError(
            f"cluster.{bad[0]}: a mixed cluster sets only {', '.join(sorted(known))}; a device "
            f"type's own fields go in its group (e.g. {{cluster: dgx_h100, nodes: 2}})"
        )
    if len(groups) < 2 or len({g.device for g in groups}) != len(groups):
        devices = ", ".join(g.device for g in groups)
        raise ConfigError(
            f"cluster={name}: a mixed cluster needs two or more groups of different device "
            f"types (one group per type, with its node count); got {devices}"
        )
    return MixedCluster(name, tuple(groups), **{k: float(v) for k, v in links.items()})


def with_overrides(cluster: ClusterShape, overrides: dict[str, Any]) -> ClusterShape:
    known = {f.name: f.type for f in fields(ClusterShape)}
    bad = sorted(set(overrides) - set(known))
    if bad:
        raise ConfigError(f"cluster.{bad[0]}: no such field. Valid: {', '.join(known)}")
    typed = {k: type(getattr(cluster, k))(v) for k, v in overrides.items()}
    return replace(cluster, **typed)
