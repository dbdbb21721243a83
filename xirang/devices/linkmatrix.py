"""Parse the device-to-device link matrices vendor tools print, and group devices by link class.

``nvidia-smi topo -m``, ``rocm-smi --showtopo`` and ``npu-smi info -t topo`` all print a square
matrix with one row and one column per device (``GPU3``, ``NPU5``), a link code per cell
(``NV18``, ``XGMI``, ``HCCS``, ``PIX``, ``SYS``) and ``X`` or ``0`` on the diagonal. The table is
parsed once here; each backend supplies only the meaning of its codes as *tiers*, fastest first.
Groups are connected components over the links of a tier and every faster tier, so a node's groups
nest: NVLink islands inside PCIe switches inside the node.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from xirang_core.specs import InterconnectGroup, Topology

_LABEL = re.compile(r"^([A-Z]+)(\d+)$")
#: a tier: the link class it names, and which cell codes belong to it
Tier = tuple[str, Callable[[str], bool]]


@dataclass(frozen=True)
class LinkTable:
    """A parsed matrix: header labels and, per row label, its cells aligned with the header."""

    columns: tuple[str, ...]
    rows: Mapping[str, tuple[str, ...]]

    def cell(self, row: str, column: str) -> str:
        """The code between ``row`` and ``column``; empty when the table lacks either."""
        cells = self.rows.get(row, ())
        try:
            return cells[self.columns.index(column)]
        except (ValueError, IndexError):
            return ""

    def indices(self, prefix: str) -> list[int]:
        """Device numbers of the rows named ``<prefix><n>`` (``GPU``, ``NPU``), in order."""
        found = [_LABEL.match(label) for label in self.rows]
        return [int(m[2]) for m in found if m and m[1] == prefix]


def parse_link_table(text: str) -> LinkTable:
    """The first matrix in ``text``: the header is the first line whose first label ends in 0.

    Tab-separated output (nvidia-smi) keeps multi-word columns such as ``CPU Affinity`` whole;
    space-separated output (rocm-smi, npu-smi) is split on runs of blanks.
    """
    columns: tuple[str, ...] = ()
    rows: dict[str, tuple[str, ...]] = {}
    for line in text.splitlines():
        cells = _cells(line)
        if not cells:
            continue
        if not columns:
            first = _LABEL.match(cells[0])
            if first and first[2] == "0":  # a one-device table has GPU0 and then CPU Affinity
                columns = tuple(cells)
            continue
        if _is_row(cells[0], columns):
            rows[cells[0]] = tuple(cells[1:])
    return LinkTable(columns, rows)


def _cells(line: str) -> list[str]:
    parts = line.split("\t") if "\t" in line else line.split()
    cells = [p.strip() for p in parts]
    while cells and not cells[0]:
        cells.pop(0)
    return cells


def _is_row(label: str, columns: Sequence[str]) -> bool:
    """Rows may exist for labels the header does not list first (NIC rows after GPU rows)."""
    match = _LABEL.match(label)
    return match is not None and any(c.startswith(match[1]) for c in columns)


def build_topology(
    table: LinkTable,
    prefix: str,
    tiers: Sequence[Tier],
    bandwidth: Mapping[str, float] | None = None,
) -> Topology:
    """Groups per tier (fastest first, a tier's groups merge every faster tier's links), then
    one ``node`` group of all devices so every device belongs to at least one group."""
    devices = table.indices(prefix)
    groups: list[InterconnectGroup] = []
    seen: set[tuple[int, ...]] = set()
    for depth, (link, _) in enumerate(tiers):
        accepts = [match for _, match in tiers[: depth + 1]]
        fresh = [m for m in _components(table, prefix, devices, accepts) if len(m) > 1]
        fresh = [m for m in fresh if m not in seen]
        seen.update(fresh)
        rate = (bandwidth or {}).get(link)
        groups.extend(InterconnectGroup(f"{link}{n}", link, m, rate) for n, m in enumerate(fresh))
    if devices:
        groups.append(InterconnectGroup("node", "node", tuple(devices)))
    return Topology(groups=tuple(groups))


def _components(
    table: LinkTable, prefix: str, devices: Iterable[int], accepts: Sequence[Callable[[str], bool]]
) -> list[tuple[int, ...]]:
    """Connected components of ``devices`` over the links some predicate in ``accepts`` takes."""
    parent = {d: d for d in devices}

    def root(d: int) -> int:
        while parent[d] != d:
            parent[d] = parent[parent[d]]
            d = parent[d]
        return d

    for a in parent:
        for b in parent:
            if a < b and _linked(table, f"{prefix}{a}", f"{prefix}{b}", accepts):
                parent[root(b)] = root(a)
    members: dict[int, list[int]] = {}
    for d in parent:
        members.setdefault(root(d), []).append(d)
    return [tuple(sorted(m)) for m in sorted(members.values())]


def _linked(table: LinkTable, a: str, b: str, accepts: Sequence[Callable[[str], bool]]) -> bool:
    codes = {table.cell(a, b), table.cell(b, a)} - {""}
    return any(accept(code) for code in codes for accept in accepts)
