"""The training loop: forward, backward, gradient sync, optimizer step; figures at log steps.

The loop reads a loss value (a device synchronisation) only at logging steps, so its cost over a
hand-written PyTorch loop stays within a few percent (``benchmarks/overhead.py`` measures it).
"""

from __future__ import annotations

import contextlib
import logging
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from xirang_core.data.tokens import TokenBatches
from xirang_core.specs import WorkerContext
from xirang_core.train.optim import lr_at
from xirang_core.train.report import MetricsLog, bits_per_byte

log = logging.getLogger("xirang.train")


@dataclass
class LoopSettings:
    max_steps: int
    accum_steps: int
    micro_batch: int
    seq_len: int
    log_every: int
    grad_clip: float
    optim: dict[str, Any]
    flops_per_token: float
    peak_flops: float
    bytes_per_token: float = 0.0  # of the corpus's text, for bits per byte; 0 = unknown


class Trainer:
    def __init__(
        self,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        batches: TokenBatches,
        settings: LoopSettings,
        ctx: WorkerContext,
        hook: Any,
        metrics: MetricsLog | None,
    ) -> None:
        self.model, self.optimizer, self.batches = model, optimizer, batches
        self.settings, self.ctx, self.hook, self.metrics = settings, ctx, hook, metrics
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.tokens_per_step = settings.micro_batch * settings.seq_len * settings.accum_steps
        self.tokens_per_step *= ctx.data_world

    def train_step(self, step: int) -> torch.Tensor:
        """One optimizer step (1-based); returns this worker's mean loss, still on the device."""
        s = self.settings
        lr = lr_at(step, s.max_steps, s.optim)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        run_step = getattr(self.model, "xirang_step", None)  # a pipeline runs whole steps
        if run_step is not None:
            total = run_step([self.batches.get(step, m) for m in range(s.accum_steps)])
        else:
            total = self._accumulate(step)
        if s.grad_clip > 0:
            self._clip(s.grad_clip)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return total

    def _accumulate(self, step: int) -> torch.Tensor:
        """Forward and backward of each micro-batch; gradients add up, synced on the last."""
        s = self.settings
        total = torch.zeros((), device=self.ctx.device)
        for micro in range(s.accum_steps):
            x, y = self.batches.get(step, micro)
            x, y = (
                x.to(self.ctx.device, non_blocking=True),
                y.to(self.ctx.device, non_blocking=True),
            )
            with self._sync_context(last=micro == s.accum_steps - 1):
                loss = self.model(x, y) / s.accum_steps
                self._backward(loss)
            total += loss.detach()
        return total

    def _backward(self, loss: torch.Tensor) -> None:
        """``loss.backward()``, unless the strategy owns backward (Colossal-AI's Booster scales
        and reduces gradients inside ``booster.backward``): the model then carries
        ``xirang_backward``, as a pipeline carries ``xirang_step``."""
        owned = getattr(self.model, "xirang_backward", None)
        if owned is None:
            loss.backward()
        else:
            owned(loss)

    def _clip(self, max_norm: float) -> None:
        """Clip by the global gradient norm; a split model's norm spans all its shards (a
        strategy whose optimizer holds the gradients clips through ``xirang_clip``)."""
        owned = getattr(self.model, "xirang_clip", None)
        if owned is not None:
            owned(max_norm)
        elif self.ctx.mesh is None:
            torch.nn.utils.clip_grad_norm_(self.params, max_norm)
        else:
            from xirang_core.parallel.grads import clip_grad_norm

            clip_grad_norm(self.params, max_norm, self.ctx.mesh)

    def _sync_context(self, last: bool) -> contextlib.AbstractContextManager:
        """Skip the gradient all-reduce on all but the last micro-batch (DDP's ``no_sync``)."""
        no_sync = getattr(self.model, "no_sync", None)
        return contextlib.nullcontext() if last or no_sync is None else no_sync()

    def fit(
        self, start_step: int = 1, on_step_end: Callable[[int], None] | None = None
    ) -> list[dict[str, Any]]:
        """Train from ``start_step`` to ``max_steps``; returns the logged records (main worker)
        or an empty list. ``on_step_end(step)`` runs after every optimizer step (checkpoints,
        heartbeat); it must stay cheap, as it runs every step."""
        s = self.settings
        self.model.train()
        records: list[dict[str, Any]] = []
        started = mark = time.perf_counter()
        mark_step = start_step - 1
        with self._progress() as advance:
            for step in range(start_step, s.max_steps + 1):
                loss = self.train_step(step)
                if on_step_end is not None:
                    on_step_end(step)
                if step % s.log_every and step not in (1, s.max_steps):
                    advance(step, None)
                    continue
                now = time.perf_counter()
                record = self._record(step, loss, now - mark, step - mark_step, now - started)
                mark, mark_step = now, step
                advance(step, record)
                if self.ctx.is_main:
                    records.append(record)
                    self._publish(record)
        return records

    def _record(
        self, step: int, loss: torch.Tensor, interval: float, steps: int, elapsed: float
    ) -> dict[str, Any]:
        loss = loss.detach().clone()
        if self.ctx.world_size > 1:  # mean over the workers that hold a loss
            dist.all_reduce(loss, op=dist.ReduceOp.SUM)
            loss /= self.ctx.loss_replicas
        tokens_per_s = self.tokens_per_step * steps / max(interval, 1e-9)
        achieved = tokens_per_s * self.settings.flops_per_token
        return {
            "step": step,
            "loss": round(loss.item(), 5),
            "bpb": bits_per_byte(loss.item(), self.settings.bytes_per_token),
            "lr": self.optimizer.param_groups[0]["lr"],
            "tokens": step * self.tokens_per_step,
            "tokens_per_s": round(tokens_per_s, 1),
            "mfu": round(achieved / self.settings.peak_flops, 5) if self.settings.peak_flops else 0,
            "elapsed_s": round(elapsed, 3),
        }

    def _publish(self, record: dict[str, Any]) -> None:
        if self.metrics is not None:
            self.metrics.write(record)
        if not sys.stdout.isatty():
            log.info(
                "step %d loss %.4f tokens/s %.0f",
                record["step"],
                record["loss"],
                record["tokens_per_s"],
            )
        self.hook.xirang_on_step_end(ctx=self.ctx, step=record["step"], metrics=record)

    @contextlib.contextmanager
    def _progress(self) -> Iterator[Any]:
        """A rich progress bar on the main worker: step, loss, tokens/s, ETA."""
        if not self.ctx.is_main:
            yield lambda step, record: None
            return
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        columns = (
            TextColumn("[bold]train"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("loss {task.fields[loss]}"),
            TextColumn("{task.fields[tps]} tok/s"),
            TimeElapsedColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
        )
        with Progress(*columns, redirect_stdout=False, redirect_stderr=False) as progress:
            task = progress.add_task("train", total=self.settings.max_steps, loss="-", tps="-")

            def advance(step: int, record: dict[str, Any] | None) -> None:
                fields = {}
                if record is not None:
                    fields = {
                        "loss": f"{record['loss']:.3f}",
                        "tps": f"{record['tokens_per_s']:,.0f}",
                    }
                progress.update(task, completed=step, **fields)

            yield advance


@torch.no_grad()
def evaluate(model: torch.nn.Module, batches: TokenBatches, device: Any, n_batches: int) -> float:
    """Mean loss over ``n_batches`` held-out batches."""
    model.eval()
    run_eval = getattr(model, "xirang_eval", None)  # a pipeline evaluates through its schedule
    if run_eval is not None:
        mean = run_eval(batches, n_batches)
    else:
        losses = [model(*(t.to(device) for t in batches.get(i))).item() for i in range(n_batches)]
        mean = sum(losses) / len(losses)
    model.train()
    return mean
