"""Read NVIDIA GPUs through the ``nvidia-smi`` command line (no Python library needed).

Uses the documented machine-readable query (``--query-gpu ... --format=csv,noheader,nounits``)
for inventory and counters, and the human header only for the CUDA version the driver supports,
which the query interface does not expose. Driver 535 renamed ``clocks_throttle_reasons`` to
``clocks_event_reasons``, and nvidia-smi answers a query naming a field it does not know with
no rows at all, so the current query (which also reads ``power.draw``) is tried first and the
older one, as drivers before 535 know it, only when the current one lists nothing.
"""

from __future__ import annotations

import itertools
import re

from xirang_core.devices.reading import DeviceReading, NodeReading, bus_key, parse_float, parse_int
from xirang_core.devices.tools import ToolOutput, ToolRunner

_INVENTORY = (
    "index",
    "name",
    "uuid",
    "pci.bus_id",
    "memory.total",
    "driver_version",
    "temperature.gpu",
    "ecc.errors.corrected.volatile.total",
    "ecc.errors.uncorrected.volatile.total",
)
QUERY_FIELDS = (*_INVENTORY, "clocks_event_reasons.active", "power.draw")
#: the query as drivers before 535 know it (no clocks_event_reasons; power read through NVML)
LEGACY_FIELDS = (*_INVENTORY, "clocks_throttle_reasons.active")


def _query(fields: tuple[str, ...]) -> tuple[str, ...]:
    return ("nvidia-smi", f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits")


QUERY = _query(QUERY_FIELDS)
LEGACY_QUERY = _query(LEGACY_FIELDS)
HEADER = ("nvidia-smi",)
MIB = 2**20

#: throttle-reason bits (NVML ``nvmlClocksEventReasons``) that mean the hardware is in trouble;
#: idle, application clocks and the software power cap are normal operation
THROTTLE_BITS = {
    0x8: "hardware slowdown",
    0x20: "software thermal slowdown",
    0x40: "hardware thermal slowdown",
    0x80: "hardware power brake",
}
_LOST = re.compile(r"Unable to determine the device handle for GPU\s*([0-9A-Fa-f:.]+):\s*(.+)")
_CUDA_VERSION = re.compile(r"CUDA Version\s*:?\s*([\d.]+)")


def read(run: ToolRunner) -> NodeReading:
    """The node as nvidia-smi reports it; a lost GPU is kept, marked with the driver's words."""
    query, fields = _listing(run)
    if not query.stdout.strip():
        return NodeReading("nvidia-smi", problem=query.error or "nvidia-smi listed no GPUs")
    listed = [parse_row(line, fields) for line in query.stdout.splitlines() if _is_row(line)]
    header = run(HEADER)
    lost = lost_devices(query.stdout + "\n" + header.stdout)
    devices = merge_lost([d for d in listed if d is not None], lost)
    return NodeReading(
        "nvidia-smi",
        devices,
        driver=driver_version(query.stdout, fields),
        runtime=cuda_version(header.stdout),
    )


def _listing(run: ToolRunner) -> tuple[ToolOutput, tuple[str, ...]]:
    """The current query's answer, or the older query's where the driver lists nothing for it."""
    current = run(QUERY)
    if any(parse_row(line) for line in current.stdout.splitlines() if _is_row(line)):
        return current, QUERY_FIELDS
    legacy = run(LEGACY_QUERY)
    return (legacy, LEGACY_FIELDS) if legacy.stdout.strip() else (current, QUERY_FIELDS)


def _is_row(line: str) -> bool:
    return bool(line.strip()) and not _LOST.search(line) and line.count(",") >= 4


def parse_row(line: str, fields: tuple[str, ...] = QUERY_FIELDS) -> DeviceReading | None:
    """One CSV row of a query of ``fields``; fields the GPU does not support read ``[N/A]``."""
    cells = [c.strip() for c in line.split(",")]
    if len(cells) != len(fields):
        return None
    row = dict(zip(fields, cells, strict=True))
    index = parse_int(row["index"])
    if index is None:
        return None
    failed = next((v.strip("[]") for v in cells if v in ("[GPU is lost]", "[Unknown Error]")), "")
    memory = parse_int(row["memory.total"])
    return DeviceReading(
        index=index,
        model=row["name"],
        memory_bytes=(memory or 0) * MIB,
        pci_bus_id=row["pci.bus_id"],
        uuid=row["uuid"],
        temperature_c=parse_float(row["temperature.gpu"]),
        ecc_corrected=parse_int(row["ecc.errors.corrected.volatile.total"]),
        ecc_uncorrected=parse_int(row["ecc.errors.uncorrected.volatile.total"]),
        throttle=throttle_reasons(
            row.get("clocks_event_reasons.active") or row["clocks_throttle_reasons.active"]
        ),
        power_w=parse_float(row.get("power.draw", "")),
        lost=failed,
    )


def throttle_reasons(mask: str) -> tuple[str, ...]:
    """The troubling reasons set in a hex bitmask such as ``0x0000000000000040``."""
    try:
        bits = int(mask, 16)
    except ValueError:
        return ()
    return tuple(reason for bit, reason in THROTTLE_BITS.items() if bits & bit)


def lost_devices(text: str) -> dict[str, str]:
    """Bus id -> the driver's reason, for every GPU nvidia-smi could not open."""
    return {m[1].rstrip("."): m[2].strip() for m in _LOST.finditer(text)}


def merge_lost(listed: list[DeviceReading], lost: dict[str, str]) -> tuple[DeviceReading, ...]:
    """Add the lost GPUs; the driver numbers GPUs in bus order, so each takes the lowest gap."""
    known = {bus_key(d.pci_bus_id) for d in listed}
    extra = [(bus, why) for bus, why in lost.items() if bus_key(bus) not in known]
    if not extra:
        return tuple(listed)
    taken = {d.index for d in listed}
    free = (i for i in itertools.count() if i not in taken)  # the gaps the lost GPUs left
    added = [
        DeviceReading(index=next(free), pci_bus_id=bus, lost=why)
        for bus, why in sorted(extra, key=lambda item: bus_key(item[0]))
    ]
    return tuple(sorted([*listed, *added], key=lambda d: d.index))


def driver_version(query: str, fields: tuple[str, ...] = QUERY_FIELDS) -> str:
    """The driver version column of the first complete row of a query of ``fields``."""
    column = fields.index("driver_version")
    for line in query.splitlines():
        cells = [c.strip() for c in line.split(",")]
        if _is_row(line) and len(cells) == len(fields):
            return cells[column]
    return ""


def cuda_version(header: str) -> str:
    """The newest CUDA version the driver supports, from nvidia-smi's header."""
    match = _CUDA_VERSION.search(header)
    return match[1] if match else ""
