"""A run's straggler, reported to the pool, and whether draining its node pays.

A balanced run (``parallel.balance=adaptive``) absorbs a slowed rank by moving work off it, and
reports it once it stays far below its calibration (a ``straggler`` event). Under the pool the
run's executor passes that report on (``POST /v1/jobs/<id>/straggler``). With
``xirang pool serve --drain-stragglers`` (off by default) the pool drains the rank's node and
requeues the job when the model says the run finishes sooner that way: the remaining steps at
the step time of a replacement device running at the rank's expected speed, plus the restart
(checkpoint, placement, start-up), against the remaining steps at today's balanced step time.
A node that holds another project's job is never drained on one tenant's report.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from xirang_core.data.shares import proportional, step_time


@dataclass(frozen=True)
class StragglerReport:
    """What the run measured: each rank's speed (micro-batches per second, averaged over its
    windows), the straggler's speed over its expected speed relative to the fastest rank, the
    step's micro-batches and what is left of the run."""

    rank: int
    speed_ratio: float
    speeds: tuple[float, ...]
    micro_batches: int
    remaining_steps: int
    restart_s: float

    @classmethod
    def from_body(cls, body: dict[str, Any]) -> StragglerReport:
        """From a request body already checked for types and ranges (the API model)."""
        report = cls(**{**body, "speeds": tuple(body["speeds"])})
        report.check()
        return report

    def check(self) -> None:
        """What the field types cannot say: the rank is one of the speeds' ranks, and every
        rank can hold at least one of the step's micro-batches."""
        if self.rank >= len(self.speeds):
            raise ValueError(
                f"rank: {self.rank} is not one of the {len(self.speeds)} ranks in speeds "
                f"(0..{len(self.speeds) - 1})"
            )
        if self.micro_batches < len(self.speeds):
            raise ValueError(
                f"micro_batches: {self.micro_batches} cannot give each of the "
                f"{len(self.speeds)} ranks one; at least {len(self.speeds)}"
            )


@dataclass(frozen=True)
class Prediction:
    """The balanced step time now and with the straggler's device replaced by one at its
    expected speed, and the seconds a drain would save over the rest of the run (negative: it
    would cost)."""

    step_s_now: float
    step_s_replaced: float
    saved_s: float


def balanced_step_s(speeds: list[float], micro_batches: int) -> float:
    """A step's compute time once the shares follow ``speeds`` (each rank at least one)."""
    return step_time(proportional(micro_batches, speeds), speeds)


def predict(report: StragglerReport) -> Prediction:
    """What draining the straggler's node would save, as the balancer's own step-time model
    predicts it (collectives left out: they do not change with the replacement)."""
    speeds = list(report.speeds)
    now = balanced_step_s(speeds, report.micro_batches)
    speeds[report.rank] /= max(report.speed_ratio, 1e-6)  # the device as calibrated
    replaced = balanced_step_s(speeds, report.micro_batches)
    saved = report.remaining_steps * (now - replaced) - report.restart_s
    return Prediction(now, replaced, saved)
