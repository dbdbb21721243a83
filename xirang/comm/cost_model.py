"""The ring cost model: a collective's time from a latency term (alpha, per message hop) and a
bandwidth term (bytes over the link's bandwidth), per link level.

For p ranks and a tensor of n bytes on a ring:

    all_reduce      2(p-1) alpha + 2(p-1)/p * n / beta
    reduce_scatter   (p-1) alpha +  (p-1)/p * n / beta
    all_gather       (p-1) alpha +  (p-1)/p * n / beta

Across nodes the hierarchical form reduce-scatters inside each node, all-reduces the 1/g shard
across nodes and all-gathers inside the node again; the slower of its levels is the bottleneck.
``fit_link`` recovers alpha and beta from measured timings, so a cluster description (or this
machine's measurements) predicts sizes and worker counts that were not measured.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from xirang_core.errors import ConfigError

OPS = ("all_reduce", "reduce_scatter", "all_gather")

#: (latency hops, bandwidth factor) per op as functions of p
_TERMS = {
    "all_reduce": (lambda p: 2 * (p - 1), lambda p: 2 * (p - 1) / p),
    "reduce_scatter": (lambda p: p - 1, lambda p: (p - 1) / p),
    "all_gather": (lambda p: p - 1, lambda p: (p - 1) / p),
}


@dataclass(frozen=True)
class Link:
    """One link level: per-hop latency in seconds and bandwidth in bytes per second."""

    latency_s: float
    bandwidth_bps: float

    def describe(self) -> str:
        return f"{self.latency_s * 1e6:.1f} us, {self.bandwidth_bps / 1e9:.2f} GB/s"


def ring_time(op: str, nbytes: float, p: int, link: Link) -> float:
    """Predicted seconds of ``op`` on ``nbytes`` over a ring of ``p`` ranks on ``link``."""
    if p <= 1:
        return 0.0
    hops, factor = _terms(op)
    return hops(p) * link.latency_s + factor(p) * nbytes / link.bandwidth_bps


def bus_bandwidth(op: str, nbytes: float, p: int, seconds: float) -> float:
    """Bytes per second each link carried: the figure comparable with a link's bandwidth."""
    return _terms(op)[1](p) * nbytes / seconds if seconds > 0 and p > 1 else 0.0


def fit_link(op: str, samples: Iterable[tuple[float, int, float]]) -> Link:
    """Least-squares alpha and beta from ``(nbytes, p, seconds)`` measurements of ``op``."""
    import numpy as np

    hops, factor = _terms(op)
    rows = [(hops(p), factor(p) * n, t) for n, p, t in samples if p > 1]
    if len(rows) < 2:
        raise ConfigError(f"fitting the {op} cost needs two or more timings with p > 1")
    a = np.array([[h, b] for h, b, _ in rows])
    t = np.array([t for _, _, t in rows])
    (alpha, inv_beta), *_ = np.linalg.lstsq(a, t, rcond=None)
    return Link(max(float(alpha), 1e-9), 1 / max(float(inv_beta), 1e-15))


@dataclass(frozen=True)
class ClusterDescription:
    """Nodes of ``devices_per_node`` ranks; ``intra`` links inside a node, ``inter`` between."""

    nodes: int
    devices_per_node: int
    intra: Link
    inter: Link

    @classmethod
    def from_mapping(cls, data: dict[str, Any]) -> ClusterDescription:
        """From ``{nodes, devices_per_node, intra: {latency_us, bandwidth_gbps}, inter: ...}``
        (bandwidth in GB/s of payload)."""
        try:
            return cls(
                int(data["nodes"]),
                int(data["devices_per_node"]),
                _link(data["intra"]),
                _link(data["inter"]),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ConfigError(
                f"cluster description: {exc!s} is missing or invalid. Expected keys: nodes, "
                f"devices_per_node, intra.latency_us, intra.bandwidth_gbps, inter.latency_us, "
                f"inter.bandwidth_gbps"
            ) from None

    @classmethod
    def load(cls, path: str | Path) -> ClusterDescription:
        import yaml

        file = Path(path)
        if not file.is_file():
            raise ConfigError(f"cluster description {path}: no such file")
        return cls.from_mapping(yaml.safe_load(file.read_text()) or {})

    def predict(self, op: str, nbytes: float, world: int) -> dict[str, Any]:
        """Seconds for ``op`` on ``world`` ranks, by level, and which level dominates."""
        g = min(world, self.devices_per_node)
        nodes = -(-world // g)
        if nodes == 1:
            seconds = ring_time(op, nbytes, g, self.intra)
            return {"seconds": seconds, "levels": {"intra": seconds}, "bottleneck": f"{op}@intra"}
        levels = {
            "intra": ring_time("reduce_scatter", nbytes, g, self.intra)
            + ring_time("all_gather", nbytes, g, self.intra),
            "inter": ring_time(op, nbytes / g, nodes, self.inter),
        }
        if op != "all_reduce":  # one pass of the intra level, not a round trip
            levels["intra"] /= 2
        slowest = max(levels, key=lambda k: levels[k])
        return {
            "seconds": sum(levels.values()),
            "levels": levels,
            "bottleneck": f"{op}@{slowest}",
        }


def _terms(op: str) -> tuple[Any, Any]:
    if op not in _TERMS:
        raise ConfigError(f"no cost model for collective '{op}'. Known: {', '.join(OPS)}")
    return _TERMS[op]


def _link(data: dict[str, Any]) -> Link:
    return Link(float(data["latency_us"]) * 1e-6, float(data["bandwidth_gbps"]) * 1e9)
