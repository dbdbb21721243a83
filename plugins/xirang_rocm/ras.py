"""AMD RAS error counters (``rocm-smi --showrasinfo all``) and amdgpu kernel-log faults.

RAS counts correctable and uncorrectable errors per hardware block (UMC is the HBM memory
controller, GFX the compute engines, XGMI_WAFL the inter-GPU links). An uncorrectable error in
any block drains the GPU; correctable ones feed the same ECC rule as every other vendor.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from xirang.devices import DRAIN, WARN, bus_key
from xirang.specs import HealthFinding

COMMAND = ("rocm-smi", "--showrasinfo", "all")
_GPU = re.compile(r"^GPU\[(\d+)\]")
_BLOCK = re.compile(r"^\s*(\w+)\s+(ENABLED|DISABLED)\s+(\d+)\s+(\d+)\s*$")
#: amdgpu messages that mean the GPU needs a reset or repair, and ones worth a look
_KERNEL_DRAIN = re.compile(r"amdgpu (\S+):.*(uncorrectable|GPU reset.*failed|GPU hang)", re.I)
_KERNEL_WARN = re.compile(r"amdgpu (\S+):.*(ring \S+ timeout|GPU reset begin|correctable)", re.I)


def parse_ras(text: str) -> dict[int, dict[str, tuple[int, int]]]:
    """GPU index -> block -> (correctable, uncorrectable), for blocks whose RAS is enabled."""
    found: dict[int, dict[str, tuple[int, int]]] = {}
    current: int | None = None
    for line in text.splitlines():
        gpu = _GPU.match(line.strip())
        if gpu:
            current = int(gpu[1])
            found.setdefault(current, {})
            continue
        block = _BLOCK.match(line)
        if block and current is not None and block[2] == "ENABLED":
            found[current][block[1]] = (int(block[3]), int(block[4]))
    return found


def totals(blocks: Mapping[str, tuple[int, int]]) -> tuple[int, int]:
    """(correctable, uncorrectable) summed over every block."""
    return sum(c for c, _ in blocks.values()), sum(u for _, u in blocks.values())


def uncorrectable_blocks(ras: Mapping[int, Mapping[str, tuple[int, int]]]) -> list[HealthFinding]:
    """One drain finding per GPU naming the blocks with uncorrectable errors."""
    findings = []
    for gpu, blocks in sorted(ras.items()):
        bad = {name: u for name, (_, u) in blocks.items() if u}
        if bad:
            listed = ", ".join(f"{name} {count}" for name, count in sorted(bad.items()))
            findings.append(HealthFinding(gpu, "ras", DRAIN, f"uncorrectable RAS errors: {listed}"))
    return findings


def kernel_findings(log: str, index_by_bus: Mapping[str, int]) -> list[HealthFinding]:
    """amdgpu driver faults from the kernel log, one per (GPU, kind), most severe first."""
    seen: dict[tuple[str, str], HealthFinding] = {}
    for line in log.splitlines():
        for pattern, severity in ((_KERNEL_DRAIN, DRAIN), (_KERNEL_WARN, WARN)):
            match = pattern.search(line)
            if match:
                bus = bus_key(match[1])
                key = (bus, match[2].lower())
                message = f"amdgpu on {bus}: {line.split('amdgpu:', 1)[-1].strip()}"
                seen.setdefault(
                    key, HealthFinding(index_by_bus.get(bus), "kernel", severity, message)
                )
                break
    return sorted(seen.values(), key=lambda f: f.severity != DRAIN)
