"""A pool job's cost in its run's summary.

A run trained by the pool (``scheduler=pool``) is charged by the pool's metering, for the
devices its job held (guaranteed or borrowed capacity, idle time included), not by the run's
own ``cost=`` quote of its training time; its summary then states that charge, so the summary
and ``xirang cost report`` give one amount for one job.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from xirang_core.train.cost import cost_fields
from xirang_core.train.report import read_summary, write_summary


def charge_summary(run_dir: str | Path, charge: dict[str, Any]) -> None:
    """Make the run's summary state the pool's ``charge`` for its job (see the module)."""
    run_dir = Path(run_dir)
    summary = read_summary(run_dir)
    first, final = summary.get("first_loss"), summary.get("final_loss")
    loss_drop = first - final if first is not None and final is not None else 0.0
    fields = cost_fields(
        summary.get("tokens", 0), loss_drop, charge["amount"], charge["currency"], charge["policy"]
    )
    fields["cost"]["device_s"] = charge["device_s"]
    fields["cost"]["by_type"] = charge.get("by_type", {})
    write_summary(run_dir, summary | fields)
