"""Multi-node NVLink: which NVLink domain (clique) each GPU belongs to, and the fabric's health.

On multi-node NVLink systems (GB200 NVL72 and similar) GPUs in different trays share one NVLink
domain through NVLink switches; ``nvidia-smi -q`` shows, per GPU, a ``Fabric`` block with the
registration ``State``/``Status``, the ``ClusterUUID`` and ``CliqueId`` of its domain, and
whether its bandwidth is degraded. GPUs on different nodes with the same cluster and clique can
run tensor-parallel traffic over NVLink; the pool reads ``nvlink_domain`` to place such jobs.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from xirang.devices import DRAIN, WARN, bus_key
from xirang.specs import HealthFinding

COMMAND = ("nvidia-smi", "-q")
_GPU = re.compile(r"^GPU\s+([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.\d)\s*$")
_FIELD = re.compile(r"^\s*([A-Za-z][\w ]*?)\s*:\s*(.*?)\s*$")
ABSENT = {"", "N/A", "Not Supported"}


def parse_fabric(text: str) -> dict[str, dict[str, str]]:
    """Bus key -> the GPU's Fabric block (``State``, ``Status``, ``CliqueId``, ``ClusterUUID``,
    ``Bandwidth``), for GPUs whose block says anything."""
    found: dict[str, dict[str, str]] = {}
    bus, block_indent = "", None
    for line in text.splitlines():
        indent = len(line) - len(line.lstrip())
        gpu = _GPU.match(line.strip())
        if gpu:
            bus, block_indent = bus_key(gpu[1]), None
        elif line.strip() == "Fabric":
            block_indent = indent
        elif block_indent is not None and line.strip():
            if indent <= block_indent:
                block_indent = None  # the next section of this GPU began
                continue
            field = _FIELD.match(line)
            if field and field[2] not in ABSENT:
                found.setdefault(bus, {})[field[1]] = field[2]
    return found


def domains(fabric: Mapping[str, Mapping[str, str]]) -> dict[str, str]:
    """Bus key -> ``<ClusterUUID>/<CliqueId>`` for GPUs registered in a multi-node domain."""
    return {
        bus: f"{block['ClusterUUID']}/{block['CliqueId']}"
        for bus, block in fabric.items()
        if block.get("State") == "Completed" and "ClusterUUID" in block and "CliqueId" in block
    }


def fabric_findings(
    fabric: Mapping[str, Mapping[str, str]], index_by_bus: Mapping[str, int]
) -> list[HealthFinding]:
    """Registration failures drain; registration not done and degraded bandwidth warn."""
    findings = []
    for bus, block in sorted(fabric.items()):
        index, state, status = index_by_bus.get(bus), block.get("State", ""), block.get("Status")
        if state == "Completed" and status not in (None, "Success"):
            findings.append(
                HealthFinding(
                    index, "nvlink-fabric", DRAIN, f"NVLink fabric registration failed: {status}"
                )
            )
        elif state in ("Not Started", "In Progress"):
            findings.append(
                HealthFinding(
                    index,
                    "nvlink-fabric",
                    WARN,
                    f"NVLink fabric registration {state.lower()}; "
                    "multi-node NVLink is not ready (fabric manager, IMEX)",
                )
            )
        if block.get("Bandwidth") == "Degraded":
            findings.append(
                HealthFinding(index, "nvlink-fabric", WARN, "NVLink fabric bandwidth is degraded")
            )
    return findings
