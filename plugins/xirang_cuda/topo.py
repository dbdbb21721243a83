"""NVLink/NVSwitch and PCIe groups, and each GPU's nearest NIC, from ``nvidia-smi topo -m``.

Cell codes (nvidia-smi's legend): ``NV#`` a bonded set of # NVLinks (every pair ``NV18`` on an
NVSwitch system), ``PIX``/``PXB`` one or several PCIe bridges, ``PHB`` a PCIe host bridge,
``NODE`` host bridges within one NUMA node, ``SYS`` (``SOC`` on old drivers) across NUMA nodes.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from xirang.devices import LinkTable, Tier, build_topology, parse_link_table
from xirang.specs import Topology

COMMAND = ("nvidia-smi", "topo", "-m")
TIERS: tuple[Tier, ...] = (
    ("nvlink", lambda code: re.fullmatch(r"NV\d+", code) is not None),
    ("pcie", lambda code: code in {"PIX", "PXB", "PHB", "NODE"}),
)
#: PCIe distance from best to worst; a GPU's rail NIC is the one it reaches soonest
PCIE_RANK = ("PIX", "PXB", "PHB", "NODE", "SYS", "SOC")
_NIC_NAME = re.compile(r"^\s*(NIC\d+):\s*(\S+)", re.MULTILINE)


def topology(text: str) -> Topology:
    return build_topology(parse_link_table(text), "GPU", TIERS)


def affinity(text: str) -> dict[int, dict[str, str]]:
    """Per GPU: its nearest NIC (the rail it should use across nodes), CPU and NUMA affinity."""
    table = parse_link_table(text)
    names = dict(_NIC_NAME.findall(text))
    found: dict[int, dict[str, str]] = {}
    for gpu in table.indices("GPU"):
        label = f"GPU{gpu}"
        facts = {
            key: table.cell(label, column)
            for key, column in (("cpu_affinity", "CPU Affinity"), ("numa_node", "NUMA Affinity"))
            if table.cell(label, column) not in ("", "N/A")
        }
        nic = nearest_nic(table, label, names)
        if nic:
            facts["nic"] = nic
        found[gpu] = facts
    return found


def nearest_nic(table: LinkTable, gpu: str, names: Mapping[str, str]) -> str:
    """``mlx5_0 (PIX)``: the closest NIC by PCIe distance, empty when the table lists none."""
    nics = [c for c in table.columns if c.startswith("NIC")]
    ranked = [
        (PCIE_RANK.index(code), nic, code)
        for nic in nics
        if (code := table.cell(gpu, nic)) in PCIE_RANK
    ]
    if not ranked:
        return ""
    _, nic, code = min(ranked)
    return f"{names.get(nic, nic)} ({code})"
