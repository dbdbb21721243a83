"""What an executor measured about a job's run, reported with its end so metering can split the
allocation into busy and idle time (:mod:`xirang_service.cost.meter` reads it from the payload).

* ``run_ended_at`` - epoch seconds when the training process(es) exited; the pool's own end of
  the allocation comes later (when it is told or notices), and the devices held in between were
  idle: the ``idle_after_end`` finding.
* ``utilisation`` - the busy share of the allocation up to that moment, in [0, 1]: the
  training loop's device-seconds (its wall time x its workers, from the run summary) over the
  device-seconds held (devices x time since the placement started). A run that waited long
  before training, or used two of eight devices it held, shows as low utilisation.
* ``tokens`` - the training tokens the run's summary counts (``xirang pool jobs`` and
  ``xirang pool history`` show them beside the job's cost).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from xirang_core.errors import XirangError
from xirang_core.train.report import SUMMARY_FILE

#: the payload keys an executor may report (and nothing else)
KEYS = ("utilisation", "run_ended_at", "tokens")


def run_usage(run_dir: str | Path, devices: int, started: float, ended: float) -> dict[str, float]:
    """The report for a run that ended at ``ended`` on ``devices`` placed at ``started``;
    ``utilisation`` is left out when the run wrote no summary (it is then unknown, not 0)."""
    report = {"run_ended_at": ended}
    summary = _summary(Path(run_dir))
    held = devices * (ended - started)
    if summary is not None and held > 0:
        busy = float(summary.get("wall_time_s") or 0.0) * int(summary.get("world_size") or 1)
        report["utilisation"] = round(min(1.0, max(0.0, busy / held)), 6)
    if summary is not None and summary.get("tokens"):
        report["tokens"] = int(summary["tokens"])
    return report


def check_report(report: Mapping[str, Any]) -> dict[str, float]:
    """An executor's report, validated: only :data:`KEYS`, utilisation in [0, 1], a finite
    end time; anything else is one clear error naming the field."""
    unknown = sorted(set(report) - set(KEYS))
    if unknown:
        raise UsageError(f"unknown usage field '{unknown[0]}'; allowed: {', '.join(KEYS)}")
    checked: dict[str, float] = {}
    for key, value in report.items():
        number = _number(key, value)
        if key == "utilisation" and not 0.0 <= number <= 1.0:
            raise UsageError(f"utilisation must be between 0 and 1, got {value!r}")
        if key == "tokens" and (number < 0 or number != int(number)):
            raise UsageError(f"tokens must be a whole number >= 0, got {value!r}")
        checked[key] = int(number) if key == "tokens" else number
    return checked


class UsageError(XirangError):
    """An executor reported usage the meter cannot use."""


def _number(key: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise UsageError(f"{key} must be a number, got {value!r}")
    return float(value)


def _summary(run_dir: Path) -> dict[str, Any] | None:
    try:
        return json.loads((run_dir / SUMMARY_FILE).read_text())
    except (OSError, ValueError):
        return None
