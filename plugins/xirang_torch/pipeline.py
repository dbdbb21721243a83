"""Pipeline parallel through ``torch.distributed.pipelining``: one stage per ``pp`` rank, a
GPipe or 1F1B schedule over the micro-batches of each optimizer step.

The strategy hands the trainer a step runner whose ``step`` runs a whole step (every
micro-batch's forward and backward) and whose ``evaluate`` gives the mean loss over held-out
batches, so the loop itself has no pipeline-specific code.

The schedule's bubbles are measured, not predicted: each stage's busy time is the forward and
backward of its micro-batches (the stage's own chunks, device-synchronised); the rest of the
step (waiting for a neighbour's activations or gradients, the fill and the drain) is idle.
:meth:`PipelineRunner.figures` gives both per stage for the metrics and the summary.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.tensor import DTensor
from torch.nn import functional as F

from xirang.parallel import gather, mark_duplicate, synchronize
from xirang_torch.mesh import coordinate, degree

SCHEDULES = {"gpipe": "ScheduleGPipe", "1f1b": "Schedule1F1B"}


def token_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross-entropy of one micro-batch (the schedule averages micro-batches)."""
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))


class PipelineRunner:
    """This rank's stage and the schedule that drives it."""

    def __init__(
        self, stage_module: nn.Module, mesh: Any, device: Any, schedule: str, micro_batches: int
    ) -> None:
        from torch.distributed import pipelining

        self.mesh, self.device = mesh, device
        self.index, self.stages = coordinate(mesh, "pp"), degree(mesh, "pp")
        self.group = mesh["pp"].get_group()
        self.stage = pipelining.PipelineStage(
            stage_module, self.index, self.stages, device, group=self.group
        )
        schedule_cls = getattr(pipelining, SCHEDULES[schedule])
        self.schedule = schedule_cls(self.stage, micro_batches, loss_fn=token_loss)
        self.micro_batches = micro_batches
        self.tied_group: Any = None
        self.tied: nn.Parameter | None = None
        self.layers: list[int] = []  # layers of each stage, first to last (the metrics')
        self._busy = self._wall = 0.0  # seconds of this stage's chunks, of whole steps
        self._steps = 0  # training steps since the last record
        self._stepping = False  # chunks are timed in training steps, not in evaluation
        self.stage.forward_one_chunk = self._timed(self.stage.forward_one_chunk)  # type: ignore[method-assign]
        self.stage.backward_one_chunk = self._timed(self.stage.backward_one_chunk)  # type: ignore[method-assign]

    def _timed(self, chunk: Callable[..., Any]) -> Callable[..., Any]:
        """``chunk`` (one micro-batch's forward or backward on this stage), its time added to
        the stage's busy time during training steps."""

        def run(*args: Any, **kwargs: Any) -> Any:
            if not self._stepping:
                return chunk(*args, **kwargs)
            synchronize(self.device)
            started = time.perf_counter()
            out = chunk(*args, **kwargs)
            synchronize(self.device)
            self._busy += time.perf_counter() - started
            return out

        return run

    @property
    def first(self) -> bool:
        return self.index == 0

    @property
    def last(self) -> bool:
        return self.index == self.stages - 1

    def tie(self, param: nn.Parameter | None) -> None:
        """Keep a weight held by both the first and the last stage (tied embeddings) equal:
        its gradients are summed over the two stages after every step, as one copy's would be.
        Every rank takes part in creating the groups, as ``new_group`` requires."""
        grid = self.mesh.mesh  # (pp, dp, tp) ranks
        me = dist.get_rank()
        for d in range(grid.shape[1]):
            for t in range(grid.shape[2]):
                ranks = sorted({int(grid[0, d, t]), int(grid[-1, d, t])})
                group = dist.new_group(ranks)
                if me in ranks:
                    self.tied_group = group
        if self.first or self.last:
            self.tied = param
        if self.last and param is not None and not self.first:
            mark_duplicate(param)  # counted once in the gradient norm

    def step(self, batches: list[tuple[torch.Tensor, torch.Tensor]]) -> torch.Tensor:
        """Forward and backward of every micro-batch; returns the mean loss on the last stage
        and zero elsewhere (the trainer sums over ranks that hold it)."""
        x, y = self._whole(batches)
        losses: list[torch.Tensor] = []
        started, self._stepping = time.perf_counter(), True
        try:
            self._run(self.schedule.step, x, y, losses)
        finally:
            self._stepping = False
        synchronize(self.device)
        self._wall += time.perf_counter() - started
        self._steps += 1
        self._sum_tied_grads()
        if self.last:
            return torch.stack([loss.detach() for loss in losses]).mean()
        return torch.zeros((), device=self.device)

    def figures(self) -> dict[str, Any]:
        """Each stage's layers, busy and idle milliseconds per step since the last record, the
        bubble: the idle share of all stages' time. A collective over every rank; a stage's
        figures are its slowest rank's."""
        per_step = 1e3 / max(self._steps, 1)
        mine = [float(self.index), self._busy * per_step, self._wall * per_step]
        self._busy = self._wall = 0.0
        self._steps = 0
        every = gather(mine, self.device)
        busy = [max(b for s, b, _ in every if s == i) for i in range(self.stages)]
        wall = [max(w for s, _, w in every if s == i) for i in range(self.stages)]
        idle = [max(w - b, 0.0) for b, w in zip(busy, wall, strict=True)]
        return {
            "pipeline_stage_layers": self.layers,
            "pipeline_busy_ms": [round(b, 3) for b in busy],
            "pipeline_idle_ms": [round(i, 3) for i in idle],
            "pipeline_bubble": round(sum(idle) / sum(wall), 4) if sum(wall) else 0.0,
        }

    def evaluate(self, batches: Any, n_batches: int) -> float:
        """Mean held-out loss over ``n_batches`` schedule runs; the same number on every rank."""
        total = torch.zeros((), device=self.device)
        for i in range(n_batches):
            part = [batches.get(i * self.micro_batches + j) for j in range(self.micro_batches)]
            x, y = self._whole(part)
            losses: list[torch.Tensor] = []
            with torch.no_grad():
                self._run(self.schedule.eval, x, y, losses)
            if self.last:
                total += torch.stack(losses).mean()
        dist.all_reduce(total, group=self.group)
        return total.item() / n_batches

    def _whole(self, batches: list[tuple[torch.Tensor, torch.Tensor]]) -> tuple[Any, Any]:
        x = torch.cat([b[0] for b in batches]).to(self.device)
        y = torch.cat([b[1] for b in batches]).to(self.device)
        return x, y

    def _run(self, run: Any, x: torch.Tensor, y: torch.Tensor, losses: list) -> None:
        if self.first:
            run(x, target=y if self.last else None, losses=losses)
        elif self.last:
            run(target=y, losses=losses)
        else:
            run()

    def _sum_tied_grads(self) -> None:
        if self.tied is None or self.tied_group is None or self.first == self.last:
            return
        grad = self.tied.grad
        assert grad is not None  # both stages used the weight in this step's backward
        local = grad.to_local() if isinstance(grad, DTensor) else grad
        dist.all_reduce(local, group=self.tied_group)
