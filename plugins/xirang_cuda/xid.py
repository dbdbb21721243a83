"""NVIDIA XID events from the kernel log, classified by what the pool must do about them.

The driver logs every GPU error as ``NVRM: Xid (PCI:0000:3b:00): 79, pid=..., <text>``. Codes are
classified after NVIDIA's XID catalogue: hardware faults that need a reset or a repair drain the
node, errors an application usually causes (13, 31, 43, 45) only warn, and codes not listed warn
so that nothing unknown is silently ignored.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from xirang.devices import DRAIN, WARN, bus_key
from xirang.specs import HealthFinding

#: codes that mean the GPU (or its memory or links) is faulty until reset or repaired
DRAIN_XIDS: Mapping[int, str] = {
    48: "double-bit ECC error",
    62: "internal micro-controller halt",
    64: "ECC row remapping failed",
    74: "NVLink error",
    79: "GPU has fallen off the bus",
    95: "uncontained ECC error",
    119: "GSP RPC timeout",
    120: "GSP error",
    140: "unrecovered ECC error",
}
#: codes that are usually an application's fault or a recoverable event
WARN_XIDS: Mapping[int, str] = {
    13: "graphics engine exception (often an application bug)",
    31: "GPU memory page fault (often an application bug)",
    43: "GPU stopped processing (application error)",
    45: "preemptive cleanup after earlier errors",
    63: "ECC page retirement or row remapping recorded",
    92: "high single-bit ECC error rate",
    94: "contained ECC error (the application was stopped)",
}
_XID = re.compile(r"NVRM: Xid \((?:PCI:)?([0-9A-Fa-f:.]+)\):\s*(\d+)(?:,\s*(.*))?")


def xid_findings(log: str, index_by_bus: Mapping[str, int]) -> list[HealthFinding]:
    """One finding per (GPU, XID code) seen in ``log``, with how often it occurred."""
    counts: dict[tuple[str, int], tuple[int, str]] = {}
    for bus, code, detail in parse_xids(log.splitlines()):
        seen, _ = counts.get((bus, code), (0, ""))
        counts[(bus, code)] = (seen + 1, detail)
    return [
        _finding(bus, code, times, detail, index_by_bus.get(bus))
        for (bus, code), (times, detail) in counts.items()
    ]


def parse_xids(lines: Iterable[str]) -> list[tuple[str, int, str]]:
    """(bus key, XID code, the driver's text) for each XID line."""
    found = []
    for line in lines:
        match = _XID.search(line)
        if match:
            found.append((bus_key(match[1]), int(match[2]), (match[3] or "").strip()))
    return found


def _finding(bus: str, code: int, times: int, detail: str, index: int | None) -> HealthFinding:
    severity = DRAIN if code in DRAIN_XIDS else WARN
    meaning = DRAIN_XIDS.get(code) or WARN_XIDS.get(code) or "not in xirang's XID table"
    repeat = f" ({times} times)" if times > 1 else ""
    tail = f"; driver said: {detail}" if detail else ""
    return HealthFinding(index, "xid", severity, f"XID {code} on {bus}{repeat}: {meaning}{tail}")
