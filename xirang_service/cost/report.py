"""Cost reports: charges grouped by team, project or device type, plus findings.

Rows are sums of integer micro-units, so the rows of any grouping add up exactly to the metered
total (the CSV keeps six decimals, the table rounds for reading only).
"""

from __future__ import annotations

import csv
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from xirang_service.cost.charges import Charge
from xirang_service.cost.errors import CostError
from xirang_service.cost.moments import iso_timestamp
from xirang_service.cost.money import from_micro
from xirang_service.cost.value import per_cost

GROUPINGS = {"team": "team", "project": "project", "device": "device_type"}
_UNITS = {"m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


@dataclass
class Row:
    """One group's totals."""

    key: str
    amount_micro: int = 0
    idle_micro: int = 0
    device_s: float = 0.0
    energy_wh: float = 0.0
    tokens: int = 0
    charges: int = 0

    def add(self, charge: Charge) -> None:
        self.amount_micro += charge.amount_micro
        self.idle_micro += charge.idle_micro
        self.device_s += charge.device_s
        self.energy_wh += charge.energy_wh
        self.tokens += charge.tokens
        self.charges += 1

    @property
    def tokens_per_cost(self) -> float | None:
        return per_cost(self.tokens, self.amount_micro) if self.tokens else None


@dataclass
class Report:
    by: str
    rows: list[Row]
    total: Row
    currency: str


def group(charges: Iterable[Charge], by: str) -> Report:
    """Totals per ``by`` (team, project or device), largest first, and the overall total."""
    if by not in GROUPINGS:
        raise CostError(f"--by {by!r}: group by one of {', '.join(GROUPINGS)}")
    attr = GROUPINGS[by]
    rows: dict[str, Row] = {}
    total = Row("total")
    currencies = set()
    for charge in charges:
        rows.setdefault(getattr(charge, attr), Row(getattr(charge, attr))).add(charge)
        total.add(charge)
        currencies.add(charge.currency)
    if len(currencies) > 1:
        raise CostError(f"charges are in several currencies ({sorted(currencies)}); report each")
    ordered = sorted(rows.values(), key=lambda r: (-r.amount_micro, r.key))
    return Report(by, ordered, total, next(iter(currencies), "USD"))


def parse_since(text: str | None, now: float | None = None) -> float | None:
    """``7d``/``24h``/``30m``/``2w`` ago, or an ISO date/time (UTC unless it names a zone)."""
    if not text:
        return None
    now = time.time() if now is None else now
    match = re.fullmatch(r"(\d+(?:\.\d+)?)([mhdw])", text.strip())
    if match:
        return now - float(match[1]) * _UNITS[match[2]]
    hint = f"--since {text!r}: give a span like 7d, 24h, 30m, 2w or a date like 2026-11-01"
    return iso_timestamp(text, hint)


CSV_FIELDS = ["key", "amount", "idle", "device_hours", "energy_kwh", "tokens", "charges"]


def write_csv(report: Report, path: str | Path) -> Path:
    """The report's rows and a total row, amounts exact to six decimals."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow([report.by, *CSV_FIELDS[1:], "currency"])
        for row in [*report.rows, report.total]:
            writer.writerow(
                [
                    row.key,
                    from_micro(row.amount_micro),
                    from_micro(row.idle_micro),
                    round(row.device_s / 3600, 6),
                    round(row.energy_wh / 1000, 6),
                    row.tokens,
                    row.charges,
                    report.currency,
                ]
            )
    return path
