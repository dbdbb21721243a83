"""When to save: every N steps, every M minutes, or ``auto`` from the failure rate.

``auto`` applies Daly's refinement of Young's formula: with C the time a save blocks training
and M the mean time between failures, the optimal interval is
``T = sqrt(2CM) * (1 + sqrt(C/2M)/3 + (C/2M)/9) - C`` (Young: ``sqrt(2CM)``), and the expected
fraction of time lost is about ``C/T + T/(2M)``; a failure costs on average ``T/2`` of recompute.
"""

from __future__ import annotations

import logging
import math
import re
import time
from dataclasses import dataclass

from xirang_core.errors import ConfigError

log = logging.getLogger("xirang.checkpoint")

#: steps an ``auto`` policy trains before its first save, to measure a step and a save
AUTO_PROBE_STEPS = 10
_FORMS = (
    "N or '<N>steps' (every N steps), '<M>m' or '<M>min' (every M minutes), "
    "'auto' (from the save cost and checkpoint.mtbf_hours), or 0 (end of the run only)"
)


def daly_interval(save_cost_s: float, mtbf_s: float) -> float:
    """Seconds of training between checkpoints that minimise expected lost time."""
    if save_cost_s <= 0:
        return 0.0
    if save_cost_s >= 2 * mtbf_s:
        return mtbf_s
    ratio = save_cost_s / (2 * mtbf_s)
    young = math.sqrt(2 * save_cost_s * mtbf_s)
    return young * (1 + math.sqrt(ratio) / 3 + ratio / 9) - save_cost_s


def expected_waste(save_cost_s: float, interval_s: float, mtbf_s: float) -> float:
    """Fraction of wall time spent saving or recomputing, for an interval of ``interval_s``."""
    return save_cost_s / max(interval_s, 1e-9) + interval_s / (2 * mtbf_s)


@dataclass
class Interval:
    """A parsed ``checkpoint.interval``: kind is ``end``, ``steps``, ``minutes`` or ``auto``."""

    kind: str
    every: float = 0.0

    @classmethod
    def parse(cls, value: object) -> Interval:
        text = str(value).strip().lower()
        if text in ("0", "", "end", "none"):
            return cls("end")
        if text == "auto":
            return cls("auto")
        match = re.fullmatch(r"(\d+(?:\.\d+)?)\s*(steps?|min|m|minutes?)?", text)
        if not match or float(match.group(1)) <= 0:
            raise ConfigError(f"checkpoint.interval={value!r}: use {_FORMS}")
        unit = match.group(2) or "steps"
        if unit.startswith("step"):
            if not float(match.group(1)).is_integer():
                raise ConfigError(
                    f"checkpoint.interval={value!r}: steps must be a whole number; use {_FORMS}"
                )
            return cls("steps", float(match.group(1)))
        return cls("minutes", float(match.group(1)))


class IntervalPolicy:
    """Decides at each step end whether to save; cheap enough to ask every step."""

    def __init__(self, interval: Interval, mtbf_hours: float, start_step: int) -> None:
        self.interval = interval
        self.mtbf_s = mtbf_hours * 3600
        self.last_step = start_step - 1
        self.last_time = time.monotonic()
        self.every_steps = int(interval.every) if interval.kind == "steps" else 0
        if interval.kind == "auto":
            self.every_steps = AUTO_PROBE_STEPS

    def due(self, step: int) -> bool:
        if self.every_steps:
            return step - self.last_step >= self.every_steps
        if self.interval.kind == "minutes":
            return time.monotonic() - self.last_time >= self.interval.every * 60
        return False

    def saved(self, step: int, save_cost_s: float) -> None:
        """Record a save; ``auto`` re-derives its interval from this save's blocking cost and
        the mean step time since the previous one."""
        now = time.monotonic()
        steps = max(step - self.last_step, 1)
        step_time = max((now - self.last_time - save_cost_s) / steps, 1e-6)
        self.last_step, self.last_time = step, now
        if self.interval.kind == "auto":
            self.every_steps = self._auto_steps(save_cost_s, step_time)

    def _auto_steps(self, save_cost_s: float, step_time: float) -> int:
        seconds = daly_interval(save_cost_s, self.mtbf_s)
        every = max(1, round(seconds / step_time))
        lost = every * step_time / 2
        log.info(
            "checkpoint interval auto: save blocks %.3f s, MTBF %.1f h -> every %d steps "
            "(%.1f s); expected lost work per failure %.1f s (%d steps), waste %.2f%%",
            save_cost_s,
            self.mtbf_s / 3600,
            every,
            every * step_time,
            lost,
            every // 2,
            100 * expected_waste(save_cost_s, every * step_time, self.mtbf_s),
        )
        return every
