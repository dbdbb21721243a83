"""Ending a sweep trial early: the loop asks at each evaluation step whether to stop here.

A sweeper plugin (``xirang_optuna``) implements ``xirang_should_prune``: on the main worker it
reports the step's objective to its study and answers whether the trial's pruner stops it.
With several workers the main worker's answer is shared (one max all-reduce per evaluation,
only in a trial), so every worker leaves the loop at the same step and the run ends cleanly:
final checkpoint, summary with ``pruned_at``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from xirang_core.sweep.objective import check_trial

if TYPE_CHECKING:
    from xirang_core.contract import RunConfig


def in_trial(config: dict[str, Any] | None) -> bool:
    """Whether this run is a trial a pruner may stop (``sweep.trial`` is set)."""
    return ((config or {}).get("sweep") or {}).get("trial") is not None


def pruned_here(ctx: Any, hook: Any, step: int, metrics: dict[str, Any]) -> bool:
    """Whether the trial ends at this evaluation step, agreed by every worker."""
    if not in_trial(ctx.config):
        return False
    verdict = ctx.is_main and any(hook.xirang_should_prune(ctx=ctx, step=step, metrics=metrics))
    if ctx.world_size == 1:
        return bool(verdict)
    import torch
    import torch.distributed as dist

    flag = torch.tensor([int(verdict)], device=ctx.device)
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    return bool(flag.item())


def join_trial(config: RunConfig, hydra_cfg: Any) -> RunConfig:
    """In a trial, check it can be pruned and return the config that records where its study
    is for the workers (``sweep.study``; outside a trial, ``config`` itself): the
    sweeper's storage, study name and pruner settings, and the sweep's folder (the default
    storage lives there). The launching process reads them from Hydra; workers, which may run
    elsewhere (torchrun, Slurm), read them from the run's ``config.yaml``."""
    if not in_trial(config):
        return config
    from omegaconf import OmegaConf

    sweeper = hydra_cfg.sweeper
    check_trial(config, sweeper)
    study = {
        "storage": sweeper.get("storage"),
        "name": sweeper.get("study_name"),
        "pruner": OmegaConf.to_container(sweeper.pruner, resolve=True),
        "sweep_dir": str(hydra_cfg.sweep.dir),
    }
    return config.replace(sweep={**config["sweep"], "study": study})
