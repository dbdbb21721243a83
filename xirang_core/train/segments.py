"""A run in segments: each start of its workers (the first, a resume after Ctrl-C or preemption,
an elastic restart) trains a segment, and the summary describes the whole run across them.

Every ``metrics.jsonl`` record carries its segment's number; ``segments.jsonl`` holds a line
when a segment starts (its first step, its workers' calibrated peak) and one when it ends by
completing or by a requested stop (its wall time and compile time). A segment that died
without the end line (a killed worker) counts up to its last logged record. Whole-run tokens/s
and MFU are the tokens computed over the time spent computing them, steps recomputed after a
restart included (their work was done, and paid for); the cost is each segment's own quote.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from xirang_core.train.interrupt import RunInterrupted
from xirang_core.train.report import METRICS_FILE
from xirang_core.train.resume import latest_saved_step

SEGMENTS_FILE = "segments.jsonl"


@dataclass
class Segment:
    """What one segment computed: the steps it ran, their tokens, and the time they took."""

    number: int
    start_step: int
    peak_flops: float
    last_step: int = 0
    wall_s: float = 0.0
    compile_s: float = 0.0
    compile_steps: int = 0

    @property
    def steps(self) -> int:
        return max(self.last_step - self.start_step + 1, 0)


@dataclass
class WholeRun:
    """Every segment of a run, and its loss curve with each step once (its latest value)."""

    segments: list[Segment]
    records: list[dict[str, Any]] = field(default_factory=list)

    @property
    def restarts(self) -> int:
        return len(self.segments) - 1

    @property
    def wall_s(self) -> float:
        return sum(s.wall_s for s in self.segments)

    def compile_figures(self) -> dict[str, Any]:
        """Seconds and steps that compiled, over every segment (each compiles afresh)."""
        return {
            "compile_s": round(sum(s.compile_s for s in self.segments), 3),
            "compile_steps": sum(s.compile_steps for s in self.segments),
        }

    def tokens_per_s(self, tokens_per_step: float) -> float:
        """Tokens computed per second of computing them, compiling steps left out."""
        tokens = sum((s.steps - s.compile_steps) * tokens_per_step for s in self.segments)
        return tokens / max(sum(s.wall_s - s.compile_s for s in self.segments), 1e-9)

    def mfu(self, tokens_per_step: float, flops_per_token: float) -> float:
        """Model FLOPs over the peak FLOPs of the workers each segment ran on, for its time."""
        capacity = sum(s.peak_flops * (s.wall_s - s.compile_s) for s in self.segments)
        tokens = sum((s.steps - s.compile_steps) * tokens_per_step for s in self.segments)
        return tokens * flops_per_token / capacity if capacity > 0 else 0.0

    def cost(self, quote: Callable[[float], Any]) -> Any:
        """The sum of each segment's quote (a price may change between segments)."""
        quotes = [quote(s.wall_s) for s in self.segments]
        amount, seconds = sum(q.amount for q in quotes), sum(q.seconds for q in quotes)
        return dataclasses.replace(quotes[0], amount=amount, seconds=seconds)


class SegmentLog:
    """The main worker's record of the segment it trains."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self.number = 1 + max(_numbers(run_dir), default=0)
        self.segment: Segment | None = None

    def begin(self, start_step: int, peak_flops: float) -> None:
        self.segment = Segment(self.number, start_step, peak_flops)
        _append(
            self.run_dir,
            {
                "segment": self.number,
                "start_step": start_step,
                "peak_flops": peak_flops,
                "time": round(time.time(), 3),
            },
        )

    def end(self, last_step: int, wall_s: float, compile_s: float, compile_steps: int) -> None:
        """Close the segment: its exact figures, for the summary and for later segments."""
        assert self.segment is not None
        seg = self.segment
        seg.last_step, seg.wall_s = last_step, wall_s
        seg.compile_s, seg.compile_steps = compile_s, compile_steps
        _append(
            self.run_dir,
            {
                "segment": seg.number,
                "last_step": last_step,
                "wall_s": round(wall_s, 3),
                "compile_s": round(compile_s, 3),
                "compile_steps": compile_steps,
            },
        )

    @contextlib.contextmanager
    def closing_on_stop(self, trainer: Any, started: float, main: bool) -> Iterator[None]:
        """A requested stop (Ctrl-C, preemption) closes the segment with the step it saved (on
        the ``main`` worker, which keeps the log)."""
        try:
            yield
        except RunInterrupted:
            if not main:
                raise
            step = latest_saved_step(self.run_dir)  # the stop's checkpoint
            self.end(step, time.perf_counter() - started, trainer.compile_s, trainer.compile_steps)
            raise

    def whole_run(self) -> WholeRun:
        """This run's segments so far, this one included (closed with :meth:`end`)."""
        return read_whole_run(self.run_dir, current=self.segment)


def read_whole_run(run_dir: Path, current: Segment | None = None) -> WholeRun:
    """The segments ``run_dir`` records; ``current`` (still open in this process) replaces its
    own lines."""
    records = _metrics(run_dir)
    starts: dict[int, dict[str, Any]] = {}
    ends: dict[int, dict[str, Any]] = {}
    for line in _lines(run_dir / SEGMENTS_FILE):
        (ends if "last_step" in line else starts)[line["segment"]] = line
    found = []
    for number, start in sorted(starts.items()):
        if current is not None and number == current.number:
            found.append(current)
            continue
        found.append(_segment(number, start, ends.get(number), records))
    latest: dict[int, dict[str, Any]] = {}
    for record in records:  # later segments recomputed some steps: keep their values
        latest[record["step"]] = record
    return WholeRun(found, [latest[s] for s in sorted(latest)])


def _segment(
    number: int, start: dict[str, Any], end: dict[str, Any] | None, records: list[dict]
) -> Segment:
    seg = Segment(number, start["start_step"], start["peak_flops"])
    if end is not None:
        seg.last_step, seg.wall_s = end["last_step"], end["wall_s"]
        seg.compile_s, seg.compile_steps = end["compile_s"], end["compile_steps"]
        return seg
    mine = [r for r in records if r.get("segment") == number]  # it died: up to its last record
    if mine:
        seg.last_step, seg.wall_s = mine[-1]["step"], mine[-1]["elapsed_s"]
        seg.compile_s = sum(r.get("compile_s", 0.0) for r in mine)
        # its compiled steps were not recorded: they count as computed
    return seg


def _numbers(run_dir: Path) -> list[int]:
    return [line["segment"] for line in _lines(run_dir / SEGMENTS_FILE)]


def _metrics(run_dir: Path) -> list[dict[str, Any]]:
    return list(_lines(run_dir / METRICS_FILE))


def _lines(path: Path) -> Iterator[dict[str, Any]]:
    if path.exists():
        for line in path.read_text().splitlines():
            if line.strip():
                yield json.loads(line)


def _append(run_dir: Path, line: dict[str, Any]) -> None:
    with open(run_dir / SEGMENTS_FILE, "a") as f:
        f.write(json.dumps(line) + "\n")
