"""xirang's training loop against a plain hand-written PyTorch loop: same model, data, steps.

Every side trains an identical copy of the embedded default model in this process. The xirang
side is a real run's loop: ``Trainer.fit`` (LR schedule, gradient clipping, the non-finite
guard, loss read at log steps, progress bar) with what every run pays on top, as the worker sets
it up: ``metrics.jsonl`` written at log steps, the step-end observers (``xirang_on_step_end``),
the run guard at every step's end (heartbeat, checkpoint bookkeeping and the saves its
``auto`` interval asks for, the stop vote) and the checkpoint times in the records. A second
xirang side adds every tracker (TensorBoard, MLflow to its local store, W&B offline). Each
real side is one run whose rounds continue its steps, after an untimed round in which its
guard saves once and its trackers open their runs (the plain side has an untimed round too).
The plain side is the loop a person would write, reading the loss at the same steps.

The machine may be shared, and a load that comes and goes lands on whichever side runs then.
So the rounds are many and short, the sides alternate within every round in an order that
rotates from round to round (a round's figure spans its steps after the first, see
``StepMarks``), and each figure is the median over rounds of the paired ratio (this round's
xirang time over this round's plain time): a spell of load covers a few rounds
of every side alike, and the median leaves out the rounds it distorted most. Beside wall time
the same ratios in CPU time: the seconds of every thread of this process and of the processes
it started (a tracker's service process included), which another program's load does not add
to, while wall time is what a user waits for.

Last line: ``overhead_ratio=<median of xirang / plain wall time per round>``
``tracked_overhead_ratio=<the same with every tracker>`` and ``cpu_overhead_ratio=<x>``
``cpu_tracked_overhead_ratio=<y>`` (the same in CPU time); goal <= 1.03 for all.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from xirang.tracking import events as tracking
from xirang_core.faults import RunGuard
from xirang_core.plugins import get_registry
from xirang_core.run import compose_config
from xirang_core.specs import WorkerContext
from xirang_core.train.interrupt import StopAtStepEnd
from xirang_core.train.loop import Trainer
from xirang_core.train.optim import build_optimizer
from xirang_core.train.report import MetricsLog
from xirang_core.train.worker import assemble, open_worker

TRACKERS = "[tensorboard,mlflow,wandb]"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=21)
    parser.add_argument("--steps", type=int, default=10, help="optimizer steps per round")
    args = parser.parse_args()
    if args.steps < 2:
        parser.error("--steps: at least 2 (a round's figure spans its steps after the first)")

    # a record every round on both sides: a round's last step is a log step
    overrides = [f"trainer.max_steps={args.steps}", f"trainer.log_every={args.steps}"]
    config = compose_config(overrides)
    tracked_config = compose_config([*overrides, f"tracker={TRACKERS}"])
    registry = get_registry()
    with tempfile.TemporaryDirectory() as work:
        ctx = open_worker(config, work, registry)
        parts = assemble(config, ctx, registry)
        plain_model = copy.deepcopy(parts.model)
        plain_opt = build_optimizer(plain_model, config["optim"])
        sides = {
            "xirang": RealRun(parts, Path(work, "run"), config, registry, trackers=False),
            "tracked": RealRun(parts, Path(work, "tracked"), tracked_config, registry, True),
        }
        sides["plain"] = PlainSide(plain_model, plain_opt, parts.train, parts.settings.log_every)
        for side in sides.values():
            side.fit(args.steps)  # untimed: the guard's first save, the trackers' runs opening
        spans = run_rounds(sides, args.rounds, args.steps)
        for side in sides.values():
            side.close()
    report(spans, args.rounds, args.steps)


def run_rounds(sides: dict, rounds: int, steps: int) -> dict[str, list[tuple[float, float]]]:
    """Per side, ``(wall, cpu)`` seconds of each round's steps after its first (see
    :class:`StepMarks`); the order in which the sides run rotates from round to round."""
    spans: dict[str, list[tuple[float, float]]] = {name: [] for name in sides}
    order = list(sides)
    for round_ in range(rounds):
        shift = round_ % len(order)
        for name in order[shift:] + order[:shift]:
            spans[name].append(sides[name].fit(steps))
    return spans


def report(spans: dict[str, list[tuple[float, float]]], rounds: int, steps: int) -> None:
    """Per-step medians of each side, then the medians of the paired per-round ratios."""

    def ratio(side: str, kind: int) -> float:
        pairs = zip(spans[side], spans["plain"], strict=True)
        return statistics.median(s[kind] / p[kind] for s, p in pairs)

    def per_step(side: str, kind: int) -> float:
        return statistics.median(s[kind] for s in spans[side]) / (steps - 1) * 1e3

    sides = ", ".join(
        f"{name} {per_step(name, 0):.2f} ms ({per_step(name, 1):.2f} ms CPU)"
        for name in ("xirang", "tracked", "plain")
    )
    print(
        f"median step: {sides} ({rounds} interleaved rounds x {steps} steps, "
        f"{torch.get_num_threads()} threads, load average {os.getloadavg()[0]:.1f})"
    )
    print(
        f"overhead_ratio={ratio('xirang', 0):.3f} tracked_overhead_ratio={ratio('tracked', 0):.3f} "
        f"cpu_overhead_ratio={ratio('xirang', 1):.3f} "
        f"cpu_tracked_overhead_ratio={ratio('tracked', 1):.3f}"
    )


def cpu_seconds() -> float:
    """CPU seconds of this process (all its threads) and of every process it started that is
    still running (W&B's service, a tracker's helper), read from ``/proc`` where there is one."""
    own = time.process_time()
    proc = Path("/proc")
    if not proc.is_dir():
        return own
    parents: dict[int, int] = {}
    ticks: dict[int, int] = {}
    for stat in proc.glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # a process that ended while being read
        pid = int(stat.parent.name)
        parents[pid], ticks[pid] = int(fields[1]), int(fields[11]) + int(fields[12])
    mine, frontier = set(), {os.getpid()}
    while frontier:
        frontier = {pid for pid, parent in parents.items() if parent in frontier} - mine
        mine |= frontier
    return own + sum(ticks[pid] for pid in mine) / os.sysconf("SC_CLK_TCK")


class RealRun:
    """One xirang run as the worker trains it (metrics file, run guard, observers, trackers
    when asked), its rounds continuing one another's steps (a tracker takes each step once)."""

    def __init__(self, parts, run_dir: Path, config, registry, trackers: bool) -> None:
        run_dir.mkdir()
        self.ctx = WorkerContext(0, 0, 1, parts.ctx.device, str(run_dir), config)
        self.parts = dataclasses.replace(parts, ctx=self.ctx)
        self.registry, self.trackers = registry, trackers
        self.metrics = MetricsLog(run_dir, 1)
        self.guard = RunGuard.open(config, self.parts, registry)
        self.done = 0
        for name in tracking.selected(config) if trackers else []:
            tracking.on_run_start(name, self.ctx, config)

    def fit(self, steps: int | None = None) -> tuple[float, float]:
        """Train the next ``steps`` steps (default: the config's); returns the seconds of all
        but the first (:class:`StepMarks`)."""
        parts = self.parts
        steps = steps or parts.settings.max_steps
        settings = dataclasses.replace(parts.settings, max_steps=self.done + steps)
        trainer = Trainer(
            parts.wrapped,
            parts.optimizer,
            parts.train,
            settings,
            self.ctx,
            self.registry.hook,
            self.metrics,
        )
        trainer.figures = self.guard.figures
        marks = StepMarks(self.done + 1, self.done + steps, StopAtStepEnd(self.guard, self.ctx))
        trainer.fit(self.done + 1, on_step_end=marks)
        self.done += steps
        return marks.spans()

    def close(self) -> None:
        self.guard.finish(self.done)
        summary = {"steps": self.done}
        for name in tracking.selected(self.ctx.config) if self.trackers else []:
            tracking.on_run_end(name, self.ctx, summary)


@dataclasses.dataclass
class PlainSide:
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    batches: object
    log_every: int
    done: int = 0

    def fit(self, steps: int) -> tuple[float, float]:
        """The next ``steps`` steps (logging at the same steps as the real runs)."""
        marks = StepMarks(self.done + 1, self.done + steps)
        plain_loop(
            self.model, self.optimizer, self.batches, self.done, steps, self.log_every, marks
        )
        self.done += steps
        return marks.spans()

    def close(self) -> None:
        pass


class StepMarks:
    """Wall and CPU seconds from the end of step ``first`` to the end of step ``last``, taken
    at each step's end (after ``then(step)``, the loop's own step-end work, where there is one).

    A round is part of a longer run: what a loop does once when it starts or ends (the progress
    display, the trainer's set-up) is paid once per real run, not once per benchmark round, so
    the first step of every round, which carries it, is left out of both sides' figures."""

    def __init__(self, first: int, last: int, then: Any = None) -> None:
        self.first, self.last, self.then = first, last, then
        self.start = self.end = (0.0, 0.0)

    def __call__(self, step: int) -> None:
        if self.then is not None:
            self.then(step)
        if step in (self.first, self.last):
            now = (time.perf_counter(), cpu_seconds())
            self.start, self.end = (now, now) if step == self.first else (self.start, now)

    def spans(self) -> tuple[float, float]:
        return self.end[0] - self.start[0], self.end[1] - self.start[1]


def plain_loop(
    model, optimizer, batches, done: int, steps: int, log_every: int, on_step_end: Any
) -> None:
    """What a person writes by hand: forward, backward, clip, step, read the loss now and then
    (steps ``done + 1`` to ``done + steps``); ``on_step_end(step)`` after each step."""
    model.train()
    for step in range(done + 1, done + steps + 1):
        x, y = batches.get(step)
        loss = model(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if step % log_every == 0 or step == 1:
            loss.item()
        on_step_end(step)


if __name__ == "__main__":
    main()
