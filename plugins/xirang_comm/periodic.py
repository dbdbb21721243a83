"""``comm=localsgd|diloco``: workers train alone for H steps, then synchronise parameters once.

Both run on what torch ships for post-local SGD: ``post_localSGD_hook`` with local SGD from the
first step and no gradient all-reduce afterwards (each worker keeps its own gradients), and a
``PeriodicModelAverager`` that averages the parameters through one all-reduce after every H-th
optimizer step (its warm-up of H - 1 steps puts the first average after step H). Local SGD
stops there; DiLoCo (Douillard et al., 2023) then applies the averaged change since the last
sync (the "pseudo-gradient") through an outer Nesterov-momentum SGD step. Local SGD is DiLoCo
with outer learning rate 1 and no momentum.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks.post_localSGD_hook import (
    PostLocalSGDState,
    post_localSGD_hook,
)
from torch.distributed.algorithms.model_averaging.averagers import PeriodicModelAverager
from torch.nn.utils import parameters_to_vector

from xirang.specs import WorkerContext
from xirang_comm.base import GradientSync
from xirang_comm.settings import DiLoCoSettings, PeriodicSettings


class PeriodicSync(GradientSync):
    name = "localsgd"
    settings_type = PeriodicSettings
    torch_hook = staticmethod(post_localSGD_hook)

    def __init__(self, **settings: Any) -> None:
        super().__init__(**settings)

    def prepare(self, model: nn.Module, ctx: WorkerContext) -> None:
        """torch's post-local-SGD state and averager; average after each step of the model's
        optimizer (the averager counts the steps and acts on every H-th)."""
        self.state = PostLocalSGDState(
            process_group=self.group,
            subgroup=None,
            start_localSGD_iter=0,
            post_local_gradient_allreduce=False,
        )
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.averager = averager(self.settings, self.group, self.params)
        owned = {id(p) for p in self.params}
        from torch.optim.optimizer import register_optimizer_step_post_hook

        def after_step(optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
            if any(id(p) in owned for g in optimizer.param_groups for p in g["params"]):
                self.averager.average_parameters(self.params)

        self.step_hook = register_optimizer_step_post_hook(after_step)

    def hook_state(self) -> PostLocalSGDState:
        return self.state

    def extra_report(self) -> dict[str, Any]:
        return {"every": self.settings.every, "outer_syncs": syncs(self.averager)}


def averager(
    settings: PeriodicSettings, group: Any, params: list[nn.Parameter]
) -> PeriodicModelAverager:
    """torch's averager, first after step H (a warm-up of H - 1 steps) and every H after; with
    an outer step other than plain averaging, DiLoCo's on top."""
    if settings.outer_lr == 1.0 and not settings.outer_momentum:
        return PeriodicModelAverager(settings.every, settings.every - 1, group)
    return OuterNesterov(settings, group, params)


def syncs(averager: PeriodicModelAverager) -> int:
    """How many times torch's schedule has averaged so far."""
    return len(range(averager.warmup_steps, averager.step, averager.period))


class OuterNesterov(PeriodicModelAverager):
    """torch's periodic averager, each average followed by DiLoCo's outer Nesterov step on the
    change since the last sync."""

    def __init__(self, settings: PeriodicSettings, group: Any, params: list[nn.Parameter]):
        super().__init__(settings.every, settings.every - 1, group)
        self.outer_lr, self.outer_momentum = settings.outer_lr, settings.outer_momentum
        self.anchor = parameters_to_vector(params).detach().clone()
        self.momentum = torch.zeros_like(self.anchor)

    def average_parameters(self, params: Iterable[Any]) -> None:
        params = list(params)
        before = syncs(self)
        super().average_parameters(params)
        if syncs(self) > before:
            self.outer_step(params)

    @torch.no_grad()
    def outer_step(self, params: list[torch.Tensor]) -> None:
        """Apply the averaged change since the last sync through the outer Nesterov step."""
        delta = self.anchor - parameters_to_vector(params)
        if self.outer_momentum:
            self.momentum.mul_(self.outer_momentum).add_(delta)
            delta = delta.add(self.momentum, alpha=self.outer_momentum)  # Nesterov
        self.anchor.sub_(delta, alpha=self.outer_lr)
        copy_into(self.anchor, params)


def copy_into(flat: torch.Tensor, params: list[torch.Tensor]) -> None:
    """Copy ``flat`` into the parameters in place (torch's vector_to_parameters would make them
    views of ``flat``, tying the parameters to the anchor)."""
    offset = 0
    for p in params:
        p.copy_(flat[offset : offset + p.numel()].view_as(p))
        offset += p.numel()


class DiLoCo(PeriodicSync):
    name = "diloco"
    settings_type = DiLoCoSettings
