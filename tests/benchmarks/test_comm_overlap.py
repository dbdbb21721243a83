"""The overlap meter's last-bucket seconds: the part of communication no overlap can hide,
from which ``benchmarks/comm.py`` bounds the hidden share."""

from __future__ import annotations

import torch

from xirang.comm.overlap import OverlapMeter


class ScriptedClock:
    """Stamps from a script, in seconds: launch and completion times chosen by the test."""

    def __init__(self, stamps: list[float]) -> None:
        self.stamps = iter(stamps)

    def stamp(self) -> float:
        return next(self.stamps)

    def ready(self, stamp: float) -> bool:
        return True

    def seconds(self, start: float, end: float) -> float:
        return end - start


def _bucket(meter: OverlapMeter, is_last: bool) -> torch.futures.Future:
    """A bucket's future, handed to the meter now; the test completes it."""
    fut: torch.futures.Future = torch.futures.Future()
    meter.track(fut, is_last)
    return fut


def test_last_bucket_is_exposed_and_bounds_the_hidden_share() -> None:
    # bucket 1 sends from 0 to 2, the last bucket is handed over at 3 (backward ends) and
    # completes at 4: 2 s hidden, 1 s exposed, all of it the last bucket's own
    meter = OverlapMeter(ScriptedClock([0.0, 3.0, 2.0, 4.0]))
    first = _bucket(meter, False)
    last = _bucket(meter, True)
    first.set_result(None)
    last.set_result(None)
    report = meter.report()
    assert (report["hidden_s"], report["exposed_s"], report["last_bucket_s"]) == (2.0, 1.0, 1.0)
    assert (
        report["hidden_frac"] <= 1 - report["last_bucket_s"] / report["comm_s"] + 1e-4
    )  # rounded to 4 places
