"""xirang's training loop against a plain hand-written PyTorch loop: same model, data, steps.

Both loops train identical copies of the embedded GPT in this process, alternating round by
round so that machine noise hits both alike. The xirang side is the real ``Trainer.fit`` (LR
schedule, gradient clipping, loss read and metrics at log steps, observers, progress bar); the
plain side is the loop a person would write, reading the loss at the same steps. A third side
is the same ``Trainer.fit`` with every tracker on (TensorBoard, MLflow to its local store, W&B
offline), each round continuing the steps of the one before, after an untimed round in which
the trackers open their runs.

Last line: ``overhead_ratio=<median xirang step time / median plain step time>`` and
``tracked_overhead_ratio=<median step time with every tracker / median plain step time>``
(goal <= 1.03 for both).
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import statistics
import tempfile
import time

import torch

from xirang_core import tracking
from xirang_core.plugins import get_registry
from xirang_core.run import compose_config
from xirang_core.specs import WorkerContext
from xirang_core.train.loop import Trainer
from xirang_core.train.optim import build_optimizer
from xirang_core.train.worker import assemble, open_worker


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--steps", type=int, default=30, help="optimizer steps per round")
    args = parser.parse_args()

    overrides = [f"trainer.max_steps={args.steps}", "trainer.log_every=10", f"tracker={TRACKERS}"]
    config = compose_config(overrides)
    registry = get_registry()
    with tempfile.TemporaryDirectory() as run_dir, tempfile.TemporaryDirectory() as tracked_dir:
        ctx = open_worker(config, run_dir, registry)  # no tracker session: the loop alone
        parts = assemble(config, ctx, registry)
        plain_model = copy.deepcopy(parts.model)
        plain_opt = build_optimizer(plain_model, config["optim"])
        tracked = Tracked(parts, WorkerContext(0, 0, 1, ctx.device, tracked_dir, config), registry)
        tracked.fit()  # untimed: the trackers open their runs on their threads meanwhile
        settings = parts.settings
        xirang_times, tracked_times, plain_times = [], [], []
        for _ in range(args.rounds):
            trainer = Trainer(
                parts.wrapped, parts.optimizer, parts.train, settings, ctx, registry.hook, None
            )
            start = time.perf_counter()
            trainer.fit()
            xirang_times.append((time.perf_counter() - start) / args.steps)
            tracked_times.append(tracked.fit() / args.steps)
            start = time.perf_counter()
            plain_loop(plain_model, plain_opt, parts.train, args.steps, settings.log_every)
            plain_times.append((time.perf_counter() - start) / args.steps)
        tracked.close()
    xirang_ms = statistics.median(xirang_times) * 1e3
    tracked_ms = statistics.median(tracked_times) * 1e3
    plain_ms = statistics.median(plain_times) * 1e3
    print(
        f"xirang step {xirang_ms:.2f} ms, with every tracker {tracked_ms:.2f} ms, plain PyTorch "
        f"step {plain_ms:.2f} ms ({args.rounds} rounds x {args.steps} steps, "
        f"{torch.get_num_threads()} threads)"
    )
    print(
        f"overhead_ratio={xirang_ms / plain_ms:.3f} "
        f"tracked_overhead_ratio={tracked_ms / plain_ms:.3f}"
    )


TRACKERS = "[tensorboard,mlflow,wandb]"


class Tracked:
    """The xirang side with every tracker on: one tracker run over all rounds, each round
    training the next ``steps`` steps (a tracker takes each step once)."""

    def __init__(self, parts, ctx: WorkerContext, registry) -> None:
        self.parts, self.ctx, self.registry = parts, ctx, registry
        self.done = 0
        for name in tracking.selected(ctx.config):
            tracking.on_run_start(name, ctx, ctx.config)

    def fit(self) -> float:
        """Train the next round's steps; returns the seconds it took."""
        parts, steps = self.parts, self.parts.settings.max_steps
        settings = dataclasses.replace(parts.settings, max_steps=self.done + steps)
        trainer = Trainer(
            parts.wrapped,
            parts.optimizer,
            parts.train,
            settings,
            self.ctx,
            self.registry.hook,
            None,
        )
        start = time.perf_counter()
        trainer.fit(start_step=self.done + 1)
        self.done += steps
        return time.perf_counter() - start

    def close(self) -> None:
        summary = {"steps": self.done}
        for name in tracking.selected(self.ctx.config):
            tracking.on_run_end(name, self.ctx, summary)


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
