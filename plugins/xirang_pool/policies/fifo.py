"""First in, first out: the baseline. Strict order, no backfill, no preemption."""

from __future__ import annotations

from typing import ClassVar

from xirang.pool import Policy


class Fifo(Policy):
    """Serve jobs in arrival order; a job that does not fit blocks those behind it."""

    name: ClassVar[str] = "fifo"
    blocking: ClassVar[bool] = True
