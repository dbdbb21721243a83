"""Logical cards: a job asks for N cards of a job class, not for a device model.

One logical card is the throughput of one device of the pool's *reference* type for that job
class. Each device type's throughput for the class (measured, e.g. Gavel's table, or calibrated)
converts cards into physical devices: a type twice as fast as the reference needs half as many
devices. A single speed factor per device type is lossy (V100 over K80 ranges 0.66x to 11.6x
across Gavel's 26 job types), so throughputs are kept per (job class, device type), with a
per-type default for classes nobody measured.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from xirang_service.pool.errors import PoolError

#: the job class of a job that names none
DEFAULT_CLASS = "default"


@dataclass
class Throughputs:
    """Throughput per (job class, device type) and the conversion of cards to devices.

    ``table[job_class][device_type]`` is a throughput in any unit (samples/s); ``speed`` is the
    per-type fallback (e.g. calibrated TFLOP/s) for classes missing from the table. A type is
    eligible for a class only when it needs at most ``max_inflation`` devices per card, so a job
    is not spread over many times more slow devices than it asked cards for.
    """

    reference: str
    speed: dict[str, float] = field(default_factory=dict)
    table: dict[str, dict[str, float]] = field(default_factory=dict)
    max_inflation: float = 2.0
    prices: dict[str, float] = field(default_factory=dict)
    _memo: dict[tuple[str, str], float] = field(default_factory=dict, repr=False, compare=False)
    _need: dict[tuple[str, int, str], int | None] = field(
        default_factory=dict, repr=False, compare=False
    )

    def throughput(self, job_class: str, device_type: str) -> float:
        """Throughput of one device of ``device_type`` on ``job_class`` (0 when it cannot run)."""
        row = self.table.get(job_class)
        if row is not None and device_type in row:
            return row[device_type]
        return self.speed.get(device_type, 1.0 if not self.speed else 0.0)

    def relative(self, job_class: str, device_type: str) -> float:
        """Cards one device of ``device_type`` is worth for ``job_class`` (memoised)."""
        key = (job_class, device_type)
        if key not in self._memo:
            ref = self.throughput(job_class, self.reference)
            self._memo[key] = self.throughput(job_class, device_type) / ref if ref > 0 else 0.0
        return self._memo[key]

    def devices_for(self, job_class: str, cards: int, device_type: str) -> int | None:
        """Physical devices of ``device_type`` giving ``cards`` cards; None when not eligible."""
        key = (job_class, cards, device_type)
        if key not in self._need:
            rel = self.relative(job_class, device_type)
            eligible = rel > 0 and 1.0 / rel <= self.max_inflation + 1e-9
            self._need[key] = max(1, math.ceil(cards / rel - 1e-9)) if eligible else None
        return self._need[key]

    def classes(self) -> list[str]:
        return sorted(self.table)

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any], types: list[str]) -> Throughputs:
        """Build from a cluster file's ``throughputs`` section (validated, with clear errors)."""
        reference = str(data.get("reference") or (types[0] if types else ""))
        if types and reference not in types:
            raise PoolError(
                f"throughputs.reference '{reference}' is not a device type of the cluster; "
                f"types: {', '.join(types)}"
            )
        speed = {str(k): float(v) for k, v in dict(data.get("speed") or {}).items()}
        table = {
            str(c): {str(t): float(v) for t, v in dict(row).items()}
            for c, row in dict(data.get("classes") or {}).items()
        }
        inflation = float(data.get("max_inflation", 2.0))
        prices = {str(k): float(v) for k, v in dict(data.get("prices") or {}).items()}
        return cls(reference, speed, table, inflation, prices)
