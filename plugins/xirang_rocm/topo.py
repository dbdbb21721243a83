"""xGMI (Infinity Fabric) and PCIe groups from ``rocm-smi --showtopo``.

The command prints four sections (weights, hops, link types, NUMA nodes). The link-type matrix
says ``XGMI`` or ``PCIE`` per pair; PCIe pairs are grouped by the NUMA node the GPUs hang off,
since GPUs on different sockets cross the CPU interconnect.
"""

from __future__ import annotations

import re

from xirang.devices import LinkTable, Tier, build_topology, parse_link_table
from xirang.specs import Topology

COMMAND = ("rocm-smi", "--showtopo")
TIERS: tuple[Tier, ...] = (
    ("xgmi", lambda code: code == "XGMI"),
    ("pcie", lambda code: code == "PCIE"),
)
_NUMA = re.compile(r"GPU\[(\d+)\]\s*:\s*\(Topology\) Numa Node:\s*(-?\d+)")


def topology(text: str) -> Topology:
    table = parse_link_table(section(text, "Link Type between two GPUs"))
    return build_topology(split_by_numa(table, numa_nodes(text)), "GPU", TIERS)


def section(text: str, title: str) -> str:
    """The lines between the ``=== title ===`` banner and the next banner."""
    lines, inside = [], False
    for line in text.splitlines():
        if line.startswith("="):
            if inside:
                break
            inside = title.lower() in line.lower()
            continue
        if inside:
            lines.append(line)
    return "\n".join(lines)


def numa_nodes(text: str) -> dict[int, int]:
    return {int(gpu): int(node) for gpu, node in _NUMA.findall(text)}


def split_by_numa(table: LinkTable, numa: dict[int, int]) -> LinkTable:
    """PCIe links between GPUs on different NUMA nodes become ``SYS`` (not a PCIe group)."""
    if not numa:
        return table
    rows = {}
    for label, cells in table.rows.items():
        a = int(label[3:])
        rows[label] = tuple(
            "SYS" if code == "PCIE" and numa.get(a) != numa.get(_index(column)) else code
            for code, column in zip(cells, table.columns, strict=False)
        )
    return LinkTable(table.columns, rows)


def _index(label: str) -> int:
    digits = "".join(ch for ch in label if ch.isdigit())
    return int(digits) if digits else -1
