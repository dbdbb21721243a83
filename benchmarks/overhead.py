"""xirang's training loop against a plain hand-written PyTorch loop: same model, data, steps.

Both loops train identical copies of the embedded GPT in this process, alternating round by
round so that machine noise hits both alike. The xirang side is the real ``Trainer.fit`` (LR
schedule, gradient clipping, loss read and metrics at log steps, observers, progress bar); the
plain side is the loop a person would write, reading the loss at the same steps.

Last line: ``overhead_ratio=<median xirang step time / median plain step time>`` (goal <= 1.03).
"""

from __future__ import annotations

import argparse
import copy
import statistics
import tempfile
import time

import torch

from xirang_core.plugins import get_registry
from xirang_core.run import compose_config
from xirang_core.train.loop import Trainer
from xirang_core.train.optim import build_optimizer
from xirang_core.train.worker import assemble, open_worker


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--steps", type=int, default=30, help="optimizer steps per round")
    args = parser.parse_args()

    overrides = [f"trainer.max_steps={args.steps}", "trainer.log_every=10"]
    config = compose_config(overrides)
    registry = get_registry()
    with tempfile.TemporaryDirectory() as run_dir:
        ctx = open_worker(config, run_dir, registry)
        parts = assemble(config, ctx, registry)
        plain_model = copy.deepcopy(parts.model)
        plain_opt = build_optimizer(plain_model, config["optim"])
        settings = parts.settings
        xirang_times, plain_times = [], []
        for _ in range(args.rounds):
            trainer = Trainer(
                parts.wrapped, parts.optimizer, parts.train, settings, ctx, registry.hook, None
            )
            start = time.perf_counter()
            trainer.fit()
            xirang_times.append((time.perf_counter() - start) / args.steps)
            start = time.perf_counter()
            plain_loop(plain_model, plain_opt, parts.train, args.steps, settings.log_every)
            plain_times.append((time.perf_counter() - start) / args.steps)
    xirang_ms = statistics.median(xirang_times) * 1e3
    plain_ms = statistics.median(plain_times) * 1e3
    print(
        f"xirang step {xirang_ms:.2f} ms, plain PyTorch step {plain_ms:.2f} ms "
        f"({args.rounds} rounds x {args.steps} steps, {torch.get_num_threads()} threads)"
    )
    print(f"overhead_ratio={xirang_ms / plain_ms:.3f}")


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
