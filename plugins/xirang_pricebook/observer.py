"""Meter every finished training run into the cost store (``xirang cost report`` shows it).

The run is charged what its own cost policy quoted in the summary, to its project (and the team
``team=`` names, ``default`` otherwise). A run submitted to the pool (``scheduler=pool``) is not
charged here: the pool's metering charges the allocation it ran in, and charging both would bill
the same device time twice. A failure to record is reported on stderr but does not fail a run
that already trained and saved its results.
"""

from __future__ import annotations

import sqlite3
import sys
import time
from typing import Any

from xirang_core.cost.meter import run_charge
from xirang_core.cost.store import CostStore

#: the scheduler whose jobs the pool meters itself
POOL_SCHEDULER = "pool"


def record_run(ctx: Any, summary: dict[str, Any]) -> None:
    config = getattr(ctx, "config", None) or {}
    if (config.get("scheduler") or {}).get("name") == POOL_SCHEDULER:
        return
    charge = run_charge(summary, config, end=time.time())
    try:
        store = CostStore()
    except (OSError, sqlite3.Error) as exc:
        print(f"xirang: run cost not recorded in the cost store: {exc}", file=sys.stderr)
        return
    try:
        store.record([charge])
    except sqlite3.Error as exc:
        print(f"xirang: run cost not recorded in the cost store: {exc}", file=sys.stderr)
    finally:
        store.close()
