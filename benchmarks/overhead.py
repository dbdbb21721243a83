"""xirang's training loop against a plain hand-written PyTorch loop: same model, data, steps.

Every side trains an identical copy of the embedded GPT in this process. The xirang side is a
real run's loop: ``Trainer.fit`` (LR schedule, gradient clipping, the non-finite guard, loss
read at log steps, progress bar) with what every run pays on top, as the worker sets it up:
``metrics.jsonl`` written at log steps, the step-end observers (``xirang_on_step_end``), the
run guard at every step's end (heartbeat, checkpoint bookkeeping and the saves its ``auto``
interval asks for, the stop vote) and the checkpoint times in the records. A second xirang side
adds every tracker (TensorBoard, MLflow to its local store, W&B offline). Each real side is one
run whose rounds continue its steps, after an untimed round in which its guard saves once and
its trackers open their runs. The plain side is the loop a person would write, reading the loss
at the same steps.

The machine may be shared: the sides alternate within every round, in an order that rotates
from round to round, and each side's figure is its best round (the least disturbed one).

Last line: ``overhead_ratio=<best xirang step time / best plain step time>`` and
``tracked_overhead_ratio=<best step time with every tracker / best plain step time>``
(goal <= 1.03 for both).
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import tempfile
import time
from pathlib import Path

import torch

from xirang_core import tracking
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
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--steps", type=int, default=30, help="optimizer steps per round")
    args = parser.parse_args()

    overrides = [f"trainer.max_steps={args.steps}", "trainer.log_every=10"]
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
        for side in sides.values():
            side.fit()  # untimed: the guard's first save, the trackers' runs opening
        sides["plain"] = PlainSide(plain_model, plain_opt, parts.train, parts.settings.log_every)
        times: dict[str, list[float]] = {name: [] for name in sides}
        order = list(sides)
        for round_ in range(args.rounds):
            for name in order[round_ % 3 :] + order[: round_ % 3]:
                times[name].append(sides[name].fit(args.steps) / args.steps)
        for side in sides.values():
            side.close()
    best = {name: min(t) * 1e3 for name, t in times.items()}
    print(
        f"xirang step {best['xirang']:.2f} ms, with every tracker {best['tracked']:.2f} ms, "
        f"plain PyTorch step {best['plain']:.2f} ms (best of {args.rounds} interleaved rounds "
        f"x {args.steps} steps, {torch.get_num_threads()} threads)"
    )
    print(
        f"overhead_ratio={best['xirang'] / best['plain']:.3f} "
        f"tracked_overhead_ratio={best['tracked'] / best['plain']:.3f}"
    )


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

    def fit(self, steps: int | None = None) -> float:
        """Train the next ``steps`` steps (default: the config's); returns the seconds."""
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
        start = time.perf_counter()
        trainer.fit(self.done + 1, on_step_end=StopAtStepEnd(self.guard, self.ctx))
        self.done += steps
        return time.perf_counter() - start

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

    def fit(self, steps: int) -> float:
        start = time.perf_counter()
        plain_loop(self.model, self.optimizer, self.batches, steps, self.log_every)
        return time.perf_counter() - start

    def close(self) -> None:
        pass


def plain_loop(model, optimizer, batches, steps: int, log_every: int) -> None:
    """What a person writes by hand: forward, backward, clip, step, print the loss now and then."""
    model.train()
    for step in range(1, steps + 1):
        x, y = batches.get(step)
        loss = model(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if step % log_every == 0 or step == 1:
            loss.item()


if __name__ == "__main__":
    main()
