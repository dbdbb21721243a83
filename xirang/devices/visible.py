"""Which of a node's devices this process's torch sees, and as which ordinals.

Vendor tools (nvidia-smi, NVML, rocm-smi, amdsmi, npu-smi) number every device of the host in
their own order and ignore the visible-devices variables; torch numbers only the devices those
variables leave, in the order they list them. With ``CUDA_VISIBLE_DEVICES=4,5,6,7`` (Slurm
without device cgroups, a shared host) vendor GPU 4 is ``cuda:0``. xirang's device index is the
torch ordinal everywhere (inventory, placement, health, power, topology); this module is the one
place that maps the vendor's readings onto it, by position, UUID or PCI bus id.

The rules, from each vendor's documentation:

- CUDA: ``CUDA_VISIBLE_DEVICES`` is a comma list of indices, ``GPU-<uuid>`` (a unique prefix is
  enough) or ``MIG-...`` instances; the first entry that is not a device ends the list, and a
  device listed twice leaves none. Indices count in ``CUDA_DEVICE_ORDER``: ``PCI_BUS_ID`` (PCI
  order, as nvidia-smi) or the default ``FASTEST_FIRST`` (equal to PCI order when every GPU is
  the same model; a mixed host needs ``PCI_BUS_ID`` to be mapped with certainty).
- ROCm: ``ROCR_VISIBLE_DEVICES`` (indices or ``GPU-<unique id>``) selects first; then
  ``HIP_VISIBLE_DEVICES`` (or ``CUDA_VISIBLE_DEVICES``, which HIP also honours) indexes the
  devices ROCr left.
- Ascend: ``ASCEND_RT_VISIBLE_DEVICES`` lists device (logic) ids.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from xirang.devices.reading import DeviceReading, NodeReading, bus_key
from xirang_core.specs import HealthFinding, InterconnectGroup, Topology

CUDA_VARIABLE = "CUDA_VISIBLE_DEVICES"
ROCR_VARIABLE = "ROCR_VISIBLE_DEVICES"
HIP_VARIABLE = "HIP_VISIBLE_DEVICES"
ASCEND_VARIABLE = "ASCEND_RT_VISIBLE_DEVICES"
#: the vendor's own index of a device, kept in its inventory record next to the torch ordinal
VENDOR_INDEX = "vendor_index"


@dataclass(frozen=True)
class VisibleDevices:
    """The vendor's devices that torch sees, ``devices[i]`` being torch ordinal ``i`` (each with
    its vendor index); ``rule`` says which variables decided, ``problem`` what went wrong."""

    devices: tuple[DeviceReading, ...]
    rule: str = ""
    problem: str = ""

    @property
    def ordinal_of(self) -> dict[int, int]:
        """Vendor index -> torch ordinal."""
        return {d.index: ordinal for ordinal, d in enumerate(self.devices)}

    def node(self, node: NodeReading) -> NodeReading:
        """``node`` with only the visible devices, numbered by torch ordinal."""
        devices = tuple(
            replace(d, index=i, extra={**d.extra, VENDOR_INDEX: d.index})
            for i, d in enumerate(self.devices)
        )
        return replace(node, devices=devices)

    def findings(self, findings: Iterable[HealthFinding]) -> list[HealthFinding]:
        """Findings renumbered by ordinal; a device this process does not see is not its
        concern (findings for the whole node, device None, stay)."""
        ordinal = self.ordinal_of
        return [
            f if f.device is None else replace(f, device=ordinal[f.device])
            for f in findings
            if f.device is None or f.device in ordinal
        ]

    def topology(self, topology: Topology) -> Topology:
        """Link groups over the visible devices only, numbered by ordinal."""
        ordinal = self.ordinal_of
        groups = []
        for group in topology.groups:
            members = tuple(sorted(ordinal[m] for m in group.devices if m in ordinal))
            if members:
                groups.append(replace(group, devices=members))
        return replace(topology, groups=tuple(groups))

    def by_ordinal(self, values: Mapping[int, float]) -> dict[int, float]:
        """A per-vendor-index reading (power) keyed by ordinal, visible devices only."""
        ordinal = self.ordinal_of
        return {ordinal[i]: v for i, v in values.items() if i in ordinal}


def everything(devices: Sequence[DeviceReading]) -> VisibleDevices:
    """Every device, in the vendor's order (a source that already numbers as torch does)."""
    return VisibleDevices(tuple(devices))


def cuda(devices: Sequence[DeviceReading], env: Mapping[str, str]) -> VisibleDevices:
    """What a CUDA process sees of ``devices`` (NVML / nvidia-smi order) under ``env``."""
    order = env.get("CUDA_DEVICE_ORDER", "FASTEST_FIRST").strip().upper()
    pool = list(devices)
    if order == "PCI_BUS_ID":
        pool.sort(key=lambda d: (bus_key(d.pci_bus_id) if d.pci_bus_id else "", d.index))
    problem = ""
    if order != "PCI_BUS_ID" and len({d.model for d in pool if d.model}) > 1:
        problem = (
            "GPUs of different models under CUDA_DEVICE_ORDER=FASTEST_FIRST: CUDA numbers them "
            "by its own speed ranking, which xirang cannot know; set CUDA_DEVICE_ORDER=PCI_BUS_ID"
        )
    value = env.get(CUDA_VARIABLE)
    if value is None:
        return VisibleDevices(tuple(pool), "", problem)
    chosen, why = select(pool, value, CUDA_VARIABLE)
    return VisibleDevices(chosen, f"{CUDA_VARIABLE}={value}", why or problem)


def rocm(devices: Sequence[DeviceReading], env: Mapping[str, str]) -> VisibleDevices:
    """What a HIP process sees of ``devices`` (amdsmi / rocm-smi order) under ``env``."""
    pool: tuple[DeviceReading, ...] = tuple(devices)
    rules, problems = [], []
    for variable in (ROCR_VARIABLE, HIP_VARIABLE if HIP_VARIABLE in env else CUDA_VARIABLE):
        value = env.get(variable)
        if value is None:
            continue
        pool, why = select(list(pool), value, variable)
        rules.append(f"{variable}={value}")
        problems += [why] if why else []
    return VisibleDevices(pool, ", ".join(rules), "; ".join(problems))


def ascend(devices: Sequence[DeviceReading], env: Mapping[str, str]) -> VisibleDevices:
    """What torch_npu sees of ``devices`` (npu-smi order) under ``env``."""
    value = env.get(ASCEND_VARIABLE)
    if value is None:
        return everything(devices)
    chosen, why = select(list(devices), value, ASCEND_VARIABLE)
    return VisibleDevices(chosen, f"{ASCEND_VARIABLE}={value}", why)


def select(
    pool: list[DeviceReading], value: str, variable: str
) -> tuple[tuple[DeviceReading, ...], str]:
    """The devices ``value`` lists, in its order, and what stopped the list early (if any)."""
    chosen: list[DeviceReading] = []
    for token in (t.strip() for t in value.split(",")):
        device = _lookup(pool, token)
        if device is None:
            if token.startswith("-"):  # CUDA_VISIBLE_DEVICES=-1: the usual way to hide all
                return tuple(chosen), ""
            if token or chosen:
                why = f"{variable}: '{token}' names no device here; the list ends before it"
                return tuple(chosen), why if token else ""
            return (), ""
        if device in chosen:
            return (), f"{variable} lists '{token}' twice, which leaves no device visible"
        chosen.append(device)
        if token.upper().startswith("MIG-"):
            break  # a CUDA process enumerates a single MIG instance
    return tuple(chosen), ""


def _lookup(pool: list[DeviceReading], token: str) -> DeviceReading | None:
    """The device ``token`` names: a position in ``pool``, a UUID (or unique prefix of one) or
    a MIG instance (by its own UUID, or the parent GPU's in ``MIG-GPU-<uuid>/<gi>/<ci>``)."""
    number = _leading_int(token)
    if number is not None:
        return pool[number] if 0 <= number < len(pool) else None
    upper = token.upper()
    if upper.startswith("MIG-GPU-"):
        return _by_uuid(pool, token[4:].split("/")[0])
    if upper.startswith("MIG-"):
        return next((d for d in pool if token in d.extra.get("mig_uuids", ())), None)
    return _by_uuid(pool, token)


def _leading_int(token: str) -> int | None:
    """CUDA reads an index like ``strtoul``: leading digits count (``1gpu`` is 1), a sign is
    allowed, and an entry without digits is not an index."""
    sign = -1 if token.startswith("-") else 1
    digits = token.lstrip("+-")
    count = len(digits) - len(digits.lstrip("0123456789"))
    return sign * int(digits[:count]) if count else None


def _by_uuid(pool: list[DeviceReading], token: str) -> DeviceReading | None:
    wanted = _plain_uuid(token)
    if not wanted:
        return None
    found = [d for d in pool if d.uuid and _plain_uuid(d.uuid).startswith(wanted)]
    return found[0] if len(found) == 1 else None


def _plain_uuid(text: str) -> str:
    """``GPU-8932f937-d72c-...`` and ``0x18f68e602b8a790f`` as bare lowercase hex, so a UUID
    written by one tool matches another's (rocm-smi's Unique ID is ROCr's ``GPU-<hex>``)."""
    text = text.strip().lower()
    for prefix in ("gpu-", "0x"):
        text = text.removeprefix(prefix)
    return text.replace("-", "")


def node_group(members: Iterable[int]) -> Topology:
    """The one fact known without a link matrix: the devices share a node."""
    members = tuple(members)
    return Topology(groups=(InterconnectGroup("node", "node", members),) if members else ())
