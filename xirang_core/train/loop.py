"""The training loop: forward, backward, gradient sync, optimizer step; figures at log steps.

The loop reads a loss value only at logging steps, so its cost over a hand-written PyTorch loop
stays within a few percent (``benchmarks/overhead.py`` measures it). The non-finite guard reads
nothing per step either where the optimizer is torch's fused AdamW or SGD (CUDA and the CPU):
it hands the optimizer a ``found_inf`` flag on the device, which drops a bad step's update
there, so a bad step never reaches the weights or a checkpoint, and the guard's count is read
at the next log step. Other optimizers (and fp16's scaler) keep one read per step, before the
optimizer step: on an accelerator it stops the host from queueing the next step's kernels
ahead, the price of skipping at the very step that went bad.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import math
import resource
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist

from xirang_core.data.prefetch import StepBatches, prefetched
from xirang_core.data.tokens import TokenBatches
from xirang_core.errors import ConfigError, XirangError
from xirang_core.hookcall import notify
from xirang_core.parallel.grads import clip_grad_norm
from xirang_core.specs import StepRunner, WorkerContext
from xirang_core.sweep.prune import pruned_here
from xirang_core.train.balance import Balancer, Unwatched
from xirang_core.train.compile import compiled_frames, without_recompiling
from xirang_core.train.host_memory import retain_freed_memory
from xirang_core.train.optim import build_schedule
from xirang_core.train.precision import Precision
from xirang_core.train.report import MetricsLog, bits_per_byte

log = logging.getLogger("xirang.train")

#: held-out batches each evaluation scores (``trainer.eval_batches``'s default)
EVAL_BATCHES = 8

#: a strategy that runs no part of a step itself: the loop runs all of it
NO_RUNNER = StepRunner()


@dataclass(frozen=True)
class Companions:
    """What the trainer calls beside model, optimizer and data; the defaults do nothing, so a
    measuring run (``parallel.smoke``, a benchmark) builds a trainer without them."""

    #: the held-out loss, for every ``eval_every`` steps (None on workers that do not hold it)
    evaluate: Callable[[], float | None] | None = None
    #: names the last good checkpoint in the non-finite guard's message
    recovery: Callable[[], str] | None = None
    #: more figures for each record (the checkpoint guard's: the newest save's times)
    figures: Callable[[], dict[str, Any]] = dict
    #: brackets every step (``trainer.profile``)
    profiler: Callable[[int], Any] = contextlib.nullcontext


ALONE = Companions()


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
    precision: str = "fp32"
    compile: bool = False
    eval_every: int = 0
    #: global batches each evaluation scores (``trainer.eval_batches``)
    eval_batches: int = EVAL_BATCHES
    nonfinite: str = "stop"
    gc_every: int = 50  # Python's garbage collector runs every N steps only (:func:`collect_every`)
    #: the run's :class:`~xirang_core.specs.LRSchedule` (``schedule=``)
    schedule: Any = field(default_factory=build_schedule)


class NonFiniteError(XirangError):
    """Training met a non-finite loss or gradient norm and ``trainer.nonfinite=stop``."""

    exit_code = 1


class Trainer:
    def __init__(
        self,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        batches: StepBatches,
        settings: LoopSettings,
        ctx: WorkerContext,
        hook: Any,
        metrics: MetricsLog | None,
        balance: Balancer | None = None,
        runner: StepRunner = NO_RUNNER,
        companions: Companions = ALONE,
    ) -> None:
        self.model, self.optimizer = model, optimizer
        accum = balance.count if balance is not None else settings.accum_steps
        self.batches = prefetched(batches, ctx.device, accum)  # pinned, 1 ahead
        self._source, self.balance = batches, balance  # balance: unequal shares per rank
        self.settings, self.ctx, self.hook, self.metrics = settings, ctx, hook, metrics
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.tokens_per_step = settings.micro_batch * settings.seq_len * settings.accum_steps
        self.tokens_per_step *= ctx.data_world
        if balance is not None:  # the step's micro-batches over all ranks, however dealt
            self.tokens_per_step = settings.micro_batch * settings.seq_len * balance.shares.total
        self.precision = Precision(settings.precision, ctx.device)
        if ctx.device.type == "cpu":  # steps reuse the pages of their activations
            retain_freed_memory()
        self.runner = runner  # what of a step the strategy runs itself
        if self.precision.scaler is not None and runner.backward is not None:
            raise ConfigError(
                "trainer.precision=fp16: this strategy runs backward itself, so xirang's "
                "gradient scaler cannot apply; use the strategy's own precision setting"
            )
        self.evaluate = companions.evaluate
        self.recovery = companions.recovery or (lambda: f"see the run directory {ctx.run_dir}")
        self.grad_norm: Any = None  # the last step's, pre-clip (a device tensor or a float)
        self._skipped = 0
        self._loss_sum = torch.zeros(())  # the last logged step's loss, summed over workers
        #: the device-side guard's (count, first step) of non-finite steps not yet read
        self._pending: tuple[torch.Tensor, torch.Tensor] | None = None
        self.compile_s, self.compile_steps = 0.0, 0
        self.data_wait_s = 0.0  # waiting for batches since the last record
        self.figures, self.profiler = companions.figures, companions.profiler
        self.pruned_at: int | None = None  # the step a sweep's pruner ended the run at
        #: the last evaluation in the loop: its step and the held-out loss (every worker's)
        self.evaluated: tuple[int, float | None] | None = None
        self._peak_beaten = False  # whether a step computed above the peak (said once)
        self._peak = settings.peak_flops  # what step MFU is against: raised when a step beats it

    def train_step(self, step: int) -> torch.Tensor:
        """One optimizer step (1-based); returns this worker's mean loss, still on the device."""
        s = self.settings
        lr = s.schedule.lr(step, s.max_steps, s.optim)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        run_step = self.runner.step  # a pipeline runs whole steps
        if run_step is not None:
            with self.precision.autocast():  # the schedule's forwards run inside
                total = run_step([self._batch(step, m) for m in range(s.accum_steps)])
        else:
            total = self._accumulate(step)
        self._meet(step, total)
        scaler = self.precision.scaler
        if scaler is not None:
            scaler.unscale_(self.optimizer)  # clip and guard the true gradients
        self.grad_norm = self._clip(s.grad_clip if s.grad_clip > 0 else math.inf)
        if self._skips_on_device():
            self._mark_nonfinite(step, total, self.grad_norm)
            self.optimizer.step()
        elif self._finite(step, total, self.grad_norm):
            if scaler is None:
                self.optimizer.step()
            else:
                scaler.step(self.optimizer)
                scaler.update()
        self.optimizer.zero_grad(set_to_none=True)
        return total

    def _meet(self, step: int, total: torch.Tensor) -> None:
        """The collectives of ``step``'s record (the loss summed over the workers, the
        balancer's tallies), issued right after the gradient sync, where every worker has just
        arrived. After the optimizer step they would hold a fast worker, at every logged step,
        until the slowest had finished its own optimizer step (a balanced worker under a 0.4
        core quota takes 2.5 times as long over the same parameters)."""
        logs = self._logs(step)
        if logs and self.ctx.world_size > 1:  # summed over the workers that hold a loss
            self._loss_sum = total.detach().clone()
            dist.all_reduce(self._loss_sum, op=dist.ReduceOp.SUM)
        if self.balance is not None:
            self.balance.meet(step, logs)

    def _logs(self, step: int) -> bool:
        """Whether ``step`` writes a record: every ``log_every`` steps, the first and the last,
        and each evaluation."""
        s = self.settings
        return self._evaluates(step) or not step % s.log_every or step in (1, s.max_steps)

    def _evaluates(self, step: int) -> bool:
        """Whether ``step`` scores the held-out batches: every ``eval_every`` steps and the
        last, so the final evaluation (the summary's) is in the last record and progress line
        too, not only in ``summary.json``."""
        s = self.settings
        return step == s.max_steps or (bool(s.eval_every) and step % s.eval_every == 0)

    @property
    def skipped_steps(self) -> int:
        """Steps whose update was not applied (``trainer.nonfinite=skip``), read from the
        device when the device-side guard has some pending."""
        self.settle()
        return self._skipped

    def _skips_on_device(self) -> bool:
        """Whether the optimizer can drop a non-finite step's update itself: torch's fused
        AdamW and SGD take a ``found_inf`` flag on the device and leave parameters, moments
        and step counts as they were where it is set (the means ``GradScaler`` uses; torch
        marks such optimizers ``_step_supports_amp_scaling``). Then no step waits for the
        device to tell the host its loss; fp16's scaler keeps its own guard."""
        return self.precision.scaler is None and bool(
            getattr(self.optimizer, "_step_supports_amp_scaling", False)
        )

    def _mark_nonfinite(self, step: int, loss: torch.Tensor, norm: Any) -> None:
        """The non-finite guard without a host read (torchtitan reads its figures only at log
        steps): the optimizer skips a bad step's update on the device, and the count and
        first bad step wait on the device until :meth:`settle` reads them."""
        bad = ~self._finite_flags(loss, norm).all()
        self.optimizer.found_inf = bad.float()  # type: ignore[attr-defined]  # GradScaler's flag
        count, first = self._pending or (torch.zeros((), dtype=torch.long, device=bad.device),) * 2
        self._pending = (count + bad, torch.where(bad & (first == 0), step, first))

    def settle(self, step: int | None = None) -> None:
        """Read the device-side guard (at log steps, whose loss is read anyway, and the last):
        skipped steps are counted (``trainer.nonfinite=skip``) or the run stops naming the
        first bad step (``stop``); parameters never took a bad step's update either way."""
        if self._pending is None:
            return
        count, first = torch.stack(self._pending).tolist()
        self._pending = None
        if count and self.settings.nonfinite == "stop":
            raise NonFiniteError(
                f"step {first}: non-finite loss or gradient norm; its update was not applied "
                f"(checked at step {step or first}: every trainer.log_every steps; "
                f"trainer.nonfinite=stop). Lower optim.lr, or set trainer.nonfinite=skip. "
                f"Last good checkpoint: {self.recovery()}"
            )
        self._skipped += count

    def _finite_flags(self, loss: torch.Tensor, norm: Any) -> torch.Tensor:
        """(gradient norm finite, loss finite) on the device. With several workers only the
        gradient norm decides: it is the same on every worker (the gradients were reduced),
        so all stop or skip together, and a bad loss anywhere makes it non-finite."""
        ok = torch.ones((), dtype=torch.bool, device=loss.device)
        norm_ok = torch.as_tensor(norm, device=loss.device).isfinite() if norm is not None else ok
        loss_ok = loss.isfinite() if self.ctx.world_size == 1 else ok
        return torch.stack([norm_ok, loss_ok])

    def _finite(self, step: int, loss: torch.Tensor, norm: Any) -> bool:
        """The non-finite guard of an optimizer that cannot skip on the device: True to take
        the optimizer step. A bad loss or gradient norm stops the run
        (``trainer.nonfinite=stop``) or skips the step (``skip``); under fp16 an overflowed
        gradient is the scaler's to skip, with a lower scale."""
        norm_ok, loss_ok = self._finite_flags(loss, norm).tolist()  # the one read per step
        if norm_ok and loss_ok:
            return True
        scaler = self.precision.scaler
        if scaler is not None and loss_ok:  # an fp16 overflow: lower the scale, skip the step
            scaler.update(scaler.get_scale() * scaler.get_backoff_factor())
        elif self.settings.nonfinite == "stop":
            what = f"loss {loss.item()}" if not loss_ok else f"gradient norm {float(norm)}"
            raise NonFiniteError(
                f"step {step}: non-finite {what}; stopped before the optimizer step "
                f"(trainer.nonfinite=stop). Lower optim.lr, or set trainer.nonfinite=skip. "
                f"Last good checkpoint: {self.recovery()}"
            )
        self._skipped += 1
        return False

    def _accumulate(self, step: int) -> torch.Tensor:
        """Forward and backward of each micro-batch; gradients add up, synced on the last.
        Balanced (``parallel.balance``), this rank runs its share, each loss divided by the
        step's micro-batches per rank on average, and its compute is timed."""
        count: int = self.settings.accum_steps
        divisor: float = count
        watch = self.balance or Unwatched()
        if self.balance is not None:
            count, divisor = self.balance.count, self.balance.divisor
        total = torch.zeros((), device=self.ctx.device)
        for micro in range(count):
            # inputs, targets and, with data.document_mask, each input's document
            batch = [t.to(self.ctx.device, non_blocking=True) for t in self._batch(step, micro)]
            last = micro == count - 1
            with self._sync_context(last=last):
                watch.start()
                with self.precision.autocast():
                    loss = self.model(*batch) * self._loss_weight(step, micro) / divisor
                watch.forward_done(last)
                self._backward(loss)
                watch.backward_done(last)
            total += loss.detach()
        return total

    def _loss_weight(self, step: int, micro: int) -> float:
        """A micro-batch's share of the step's trained targets (fine-tuning's reply tokens);
        1.0 for batches that train on every target."""
        return self._source.loss_weight(step, micro)

    def _batch(self, step: int, micro: int) -> Any:
        """The batch, timing the wait for it: whether the data path keeps up with training."""
        started = time.perf_counter()
        batch = self.batches.get(step, micro)
        self.data_wait_s += time.perf_counter() - started
        return batch

    def _backward(self, loss: torch.Tensor) -> None:
        """``loss.backward()``, unless the strategy owns backward (Colossal-AI's Booster scales
        and reduces gradients inside ``booster.backward``): its runner's ``backward``, as a
        pipeline's runner has ``step``."""
        owned = self.runner.backward
        if owned is not None:
            owned(loss)
        elif self.precision.scaler is not None:
            self.precision.scaler.scale(loss).backward()
        else:
            loss.backward()

    def _clip(self, max_norm: float) -> Any:
        """Clip by the global gradient norm (``inf``: measure only) and return it, pre-clip; a
        split model's norm spans all its shards (a strategy whose optimizer holds the
        gradients clips through its runner's ``clip``)."""
        owned = self.runner.clip
        if owned is not None:
            return owned(max_norm)
        if self.ctx.mesh is not None:
            return clip_grad_norm(self.params, max_norm, self.ctx.mesh)
        grads = [p.grad for p in self.params if p.grad is not None]
        if math.isinf(max_norm):
            return torch.nn.utils.get_total_norm(grads) if grads else None
        return torch.nn.utils.clip_grad_norm_(self.params, max_norm)

    def _sync_context(self, last: bool) -> contextlib.AbstractContextManager:
        """Skip the gradient all-reduce on all but the last micro-batch (DDP's ``no_sync``)."""
        no_sync = getattr(self.model, "no_sync", None)
        return contextlib.nullcontext() if last or no_sync is None else no_sync()

    def fit(
        self, start_step: int = 1, on_step_end: Callable[[int], None] | None = None
    ) -> list[dict[str, Any]]:
        """Train from ``start_step`` to ``max_steps``; returns the logged records (main worker)
        or an empty list. ``on_step_end(step)`` runs after every optimizer step (checkpoints,
        heartbeat); it must stay cheap, as it runs every step. Steps during which
        ``torch.compile`` compiled count in ``compile_s``, not in the records' tokens/s."""
        s = self.settings
        self.model.train()
        if self.balance is not None:  # a resume may have put the checkpoint's shares back
            self.batches = prefetched(self._source, self.ctx.device, self.balance.count)
        records: list[dict[str, Any]] = []
        started = mark = time.perf_counter()
        mark_step, compiling = start_step - 1, (0.0, 0)  # compile time and steps since mark
        with self._progress() as advance, collect_every(s.gc_every) as collect:
            for step in range(start_step, s.max_steps + 1):
                with self.profiler(step):
                    loss, spent = self._timed_step(step)
                compiling = (compiling[0] + spent, compiling[1] + (spent > 0))
                if self.balance is not None and self.balance.after_step(step):
                    self.batches = prefetched(self._source, self.ctx.device, self.balance.count)
                if on_step_end is not None:
                    on_step_end(step)
                collect(step)
                evaluating = self._evaluates(step)
                if not self._logs(step):
                    advance(step, None)
                    continue
                self.settle(step)
                now = time.perf_counter()
                interval, steps = now - mark - compiling[0], step - mark_step - compiling[1]
                if steps == 0:  # every step since the last record compiled: time them all
                    interval, steps = now - mark, step - mark_step
                record = self._record(step, loss, interval, steps, now - started)
                record["data_wait_ms"] = round(1e3 * self.data_wait_s / (step - mark_step), 3)
                record |= self.figures()
                if self.runner.figures is not None:  # a pipeline's busy and idle stages
                    record |= self.runner.figures()
                if self.balance is not None:  # the ranks' tallies, met at the sync
                    record |= self.balance.figures(interval / steps, steps)
                self.data_wait_s = 0.0
                if compiling[0]:
                    record["compile_s"] = round(compiling[0], 3)
                if evaluating and self.evaluate is not None:
                    self._add_val_loss(record)
                mark, mark_step, compiling = time.perf_counter(), step, (0.0, 0)
                advance(step, record)
                if self.ctx.is_main:
                    records.append(record)
                    self._publish(record)
                last = step == s.max_steps  # the run ends here: nothing left to prune
                if evaluating and not last and pruned_here(self.ctx, self.hook, step, record):
                    self.pruned_at = step
                    break
        return records

    def _timed_step(self, step: int) -> tuple[torch.Tensor, float]:
        """One step's loss, and the seconds it took when torch.compile compiled during it
        (else 0): a dictionary read per step, no device sync."""
        if not self.settings.compile:
            return self.train_step(step), 0.0
        frames, started = compiled_frames(), time.perf_counter()
        loss = self.train_step(step)
        if compiled_frames() == frames:
            return loss, 0.0
        spent = time.perf_counter() - started
        self.compile_s, self.compile_steps = self.compile_s + spent, self.compile_steps + 1
        return loss, spent

    def _add_val_loss(self, record: dict[str, Any]) -> None:
        """The held-out loss at this step (every worker that holds part of the model takes
        part); the model goes back to training mode after."""
        assert self.evaluate is not None
        with self.precision.autocast():
            val_loss = self.evaluate()
        self.evaluated = (record["step"], val_loss)
        if val_loss is not None:
            record["val_loss"] = round(val_loss, 5)

    def _record(
        self, step: int, loss: torch.Tensor, interval: float, steps: int, elapsed: float
    ) -> dict[str, Any]:
        if self.ctx.world_size > 1:  # mean over the workers that hold a loss (see _meet)
            loss = self._loss_sum / self.ctx.loss_replicas
        tokens_per_s = self.tokens_per_step * steps / max(interval, 1e-9)
        mfu, note = self._mfu(tokens_per_s * self.settings.flops_per_token)
        record = {
            "step": step,
            "loss": round(loss.item(), 5),
            "bpb": bits_per_byte(loss.item(), self.settings.bytes_per_token),
            "lr": self.optimizer.param_groups[0]["lr"],
            "grad_norm": _number(self.grad_norm),
            "tokens": step * self.tokens_per_step,
            "tokens_per_s": round(tokens_per_s, 1),
            "mfu": round(mfu, 5),
            "mem_bytes": peak_memory(self.ctx.device),
            "elapsed_s": round(elapsed, 3),
        }
        return record | ({"mfu_note": note} if note else {})

    def _mfu(self, achieved: float) -> tuple[float, str]:
        """``achieved`` FLOP/s per worker over the peak, never above 1, and a note the first
        time a step beats the peak: that shows the peak was measured low (under load), so from
        that step on the figures are against what the device did (the summary measures the
        peak again and reports against that). 0 with no peak known."""
        peak = self._peak
        if not peak or achieved <= peak:
            return (achieved / peak if peak else 0.0), ""
        self._peak = achieved
        if self._peak_beaten:
            return 1.0, ""
        self._peak_beaten = True
        note = (
            f"computed {100 * achieved / peak:.0f}% of the peak measured for this run: it was "
            "measured low (under load); MFU from here is against what this run reached, and "
            "the summary measures the peak again"
        )
        log.warning("%s", note)
        return 1.0, note

    def _publish(self, record: dict[str, Any]) -> None:
        if self.metrics is not None:
            self.metrics.write(record)
        if not sys.stdout.isatty() and self.ctx.is_main:  # a plain line per log step, printed:
            # the workers of a multi-worker run have no logging set up (only Hydra's process has)
            print(progress_line(record), flush=True)
        notify(self.hook, "xirang_on_step_end", ctx=self.ctx, step=record["step"], metrics=record)

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
            TextColumn("{task.fields[val]}"),
            TextColumn("{task.fields[tps]} tok/s"),
            TimeElapsedColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
        )
        # 2 redraws a second, not rich's 10: a terminal redraw costs about 1 ms of CPU on the
        # training process (measured), 1% of a core at 10 Hz, and an ETA needs no more
        with Progress(
            *columns, refresh_per_second=2, redirect_stdout=False, redirect_stderr=False
        ) as progress:
            task = progress.add_task(
                "train", total=self.settings.max_steps, loss="-", tps="-", val=""
            )

            def advance(step: int, record: dict[str, Any] | None) -> None:
                fields: dict[str, Any] = {}
                if record is not None:
                    fields = {
                        "loss": f"{record['loss']:.3f}",
                        "tps": f"{record['tokens_per_s']:,.0f}",
                    }
                    if "val_loss" in record:  # the latest evaluation stays until the next
                        fields["val"] = f"eval loss {record['val_loss']:.3f}"
                progress.update(task, completed=step, **fields)

            yield advance


def progress_line(record: dict[str, Any]) -> str:
    """The plain progress line of a log step (output that is not a terminal), with the
    evaluation loss when the step evaluated."""
    line = f"step {record['step']} loss {record['loss']:.4f}"
    if "val_loss" in record:
        line += f" eval_loss {record['val_loss']:.4f}"
    return line + f" tokens/s {record['tokens_per_s']:.0f}"


@contextlib.contextmanager
def collect_every(every: int) -> Iterator[Callable[[int], None]]:
    """torchtitan's garbage-collection policy while training: Python's automatic collector
    off, one collection of the young generations at the start and then every ``every``
    steps (``collect(step)``). Left automatic, it runs whenever allocations pass its
    threshold, at a different step on each worker, and a collective then waits for the
    slowest; a step allocates thousands of Python objects (tensors, autograd nodes). The
    collector's own state comes back at the end (an in-process worker shares the process)."""
    enabled = gc.isenabled()
    gc.disable()
    gc.collect(1)

    def collect(step: int) -> None:
        if step % every == 0:
            gc.collect(1)

    try:
        yield collect
    finally:
        if enabled:
            gc.enable()


def _number(value: Any) -> float | None:
    """A logged figure as a plain float (rounded), or None when there is none."""
    if value is None:
        return None
    value = float(value)
    return round(value, 5) if math.isfinite(value) else value


def peak_memory(device: torch.device) -> int:
    """Peak bytes this worker has held: the allocator's peak on an accelerator, the process's
    resident-set high-water mark on the CPU."""
    module = getattr(torch, device.type, None)
    peak = getattr(module, "max_memory_allocated", None) if device.type != "cpu" else None
    if peak is not None:
        return int(peak(device))
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux


@torch.no_grad()
def evaluate(
    model: torch.nn.Module,
    batches: TokenBatches,
    device: Any,
    n_batches: int,
    runner: StepRunner = NO_RUNNER,
) -> float:
    """Mean loss over ``n_batches`` held-out batches; compiled blocks are not compiled again."""
    model.eval()
    run_eval = runner.evaluate  # a pipeline evaluates through its schedule
    with without_recompiling():
        if run_eval is not None:
            mean = run_eval(batches, n_batches)
        else:
            losses = [
                model(*(t.to(device) for t in batches.get(i))).item() for i in range(n_batches)
            ]
            mean = sum(losses) / len(losses)
    model.train()
    return mean
