"""HCCS and PCIe groups from ``npu-smi info -t topo``.

Codes (npu-smi's legend and ACL's ``aclrtGetDevicesTopo``): ``HCCS`` Huawei Cache Coherence
System links, ``HCCS_SW`` through an HCCS switch, ``SIO`` the two dies of one package, ``PIX`` one
PCIe switch, ``PHB`` a PCIe host bridge, ``SYS`` across NUMA nodes.
"""

from __future__ import annotations

from xirang.devices import Tier, build_topology, parse_link_table
from xirang.specs import Topology

COMMAND = ("npu-smi", "info", "-t", "topo")
TIERS: tuple[Tier, ...] = (
    ("hccs", lambda code: code in {"HCCS", "HCCS_SW", "SIO"}),
    ("pcie", lambda code: code in {"PIX", "PXB", "PHB"}),
)


def topology(text: str) -> Topology:
    return build_topology(parse_link_table(text), "NPU", TIERS)
