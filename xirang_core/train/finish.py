"""What a run does after its last step, said before it starts and timed when it ends.

After the last step a run saves its final checkpoint (waiting for an asynchronous save in
flight), scores the held-out batches, samples text and writes its report; on a loaded host that
took up to 171 s with nothing printed, after a progress bar that had reached its end. The main
worker now says what comes, and then how long each part took.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Iterator


class Finishing:
    """The parts of a run's end (``checkpoint``, ``validation``, ``sample``, ``report``), each
    timed by :meth:`part`; only the main worker (``shown``) prints."""

    def __init__(self, shown: bool, eval_batches: int, sample_tokens: int) -> None:
        self.shown = shown
        self.took: dict[str, float] = {}
        self.started = time.perf_counter()
        sample = f", sampling {sample_tokens} tokens" if sample_tokens > 0 else ""
        self._say(
            f"xirang: training done; saving the final checkpoint, scoring {eval_batches} "
            f"held-out batches{sample} and writing the report ..."
        )

    @contextlib.contextmanager
    def part(self, name: str) -> Iterator[None]:
        started = time.perf_counter()
        try:
            yield
        finally:
            self.took[name] = time.perf_counter() - started

    def done(self) -> None:
        parts = ", ".join(f"{name} {seconds:.1f} s" for name, seconds in self.took.items())
        self._say(f"xirang: finished in {time.perf_counter() - self.started:.1f} s ({parts})")

    def _say(self, line: str) -> None:
        if self.shown:
            print(line, file=sys.stderr, flush=True)
