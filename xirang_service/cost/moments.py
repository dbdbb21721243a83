"""Moments in time as users write them in cost settings and commands: ISO dates and times."""

from __future__ import annotations

from datetime import datetime, timezone

from xirang_service.cost.errors import CostError


def iso_timestamp(value: str | datetime, problem: str) -> float:
    """Epoch seconds of an ISO date/time (UTC unless it names a zone); ``problem`` starts the
    one-line error a value that is not one gets (what was wrong and what to give instead)."""
    if isinstance(value, datetime):
        moment = value
    else:
        try:
            moment = datetime.fromisoformat(str(value).strip())
        except ValueError:
            raise CostError(problem) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return moment.timestamp()
