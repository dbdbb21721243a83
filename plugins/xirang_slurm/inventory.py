"""The pool's hardware from Slurm: nodes, their devices (GPU gres, else CPUs) and leaf switches.

``scontrol show node`` gives each node's gres (``gpu:a100:8``) and CPU count; ``scontrol show
topology`` gives the leaf switch of every node (topology/tree). The result is a list of node
specs in the form :class:`xirang_service.pool.cluster.Inventory` and cluster files use.
"""

from __future__ import annotations

import re
from typing import Any

from xirang_slurm.commands import parse_records, run

_GRES = re.compile(r"gpu(?::(?P<type>[^:(,]+))?:(?P<count>\d+)")


def nodes() -> list[dict[str, Any]]:
    """Node specs of the Slurm cluster this machine talks to."""
    leaves = switch_of_nodes(run("scontrol", "-o", "show", "topology"))
    return node_specs(run("scontrol", "-o", "show", "node"), leaves)


def node_specs(scontrol_nodes: str, leaves: dict[str, str]) -> list[dict[str, Any]]:
    specs = []
    for record in parse_records(scontrol_nodes):
        name = record["NodeName"]
        match = _GRES.search(record.get("Gres", "") or "")
        if match:
            kind, count = (match["type"] or "gpu").lower(), int(match["count"])
        else:
            kind, count = "cpu", int(record.get("CPUTot", "1"))
        state = record.get("State", "")
        specs.append(
            {
                "name": name,
                "type": kind,
                "devices": count,
                "leaf": leaves.get(name, "leaf0"),
                "spine": "spine0",
                "healthy": not any(s in state for s in ("DRAIN", "DOWN", "FAIL")),
            }
        )
    return specs


def switch_of_nodes(scontrol_topology: str) -> dict[str, str]:
    """Leaf switch (level 0) of each node from ``scontrol show topology``."""
    leaves: dict[str, str] = {}
    for record in parse_records(scontrol_topology):
        if record.get("Level") == "0" and record.get("Nodes"):
            for node in expand_hostlist(record["Nodes"]):
                leaves[node] = record["SwitchName"]
    return leaves


def expand_hostlist(hostlist: str) -> list[str]:
    """``gpu[01-03],cpu1`` -> gpu01, gpu02, gpu03, cpu1 (Slurm's compact host lists)."""
    names: list[str] = []
    for part in re.findall(r"[^,\[]+(?:\[[^\]]*\])?", hostlist):
        match = re.fullmatch(r"(.*)\[(.*)\]", part)
        if not match:
            names.append(part)
            continue
        prefix, ranges = match.groups()
        for item in ranges.split(","):
            low, _, high = item.partition("-")
            for i in range(int(low), int(high or low) + 1):
                names.append(f"{prefix}{i:0{len(low)}d}")
    return names
