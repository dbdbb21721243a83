"""The Hydra sweeper plugin ``hydra/sweeper=optuna`` and ``optuna_pruning`` name; Optuna loads
only when a sweep starts (the core registers this class with Hydra at every run's start)."""

from __future__ import annotations

from typing import Any

from hydra.plugins.sweeper import Sweeper
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig


class OptunaSweeper(Sweeper):
    """Runs :class:`xirang_optuna.sweeper.OptunaSearch` with the sweeper's settings."""

    # Hydra instantiates plugins only from its ``hydra_plugins`` namespace (the config's
    # ``_target_``), which an editable install cannot extend: the core registers it there.
    __module__ = "hydra_plugins.xirang_optuna"

    def __init__(self, **settings: Any) -> None:
        from xirang_optuna.sweeper import OptunaSearch

        self.search = OptunaSearch(**settings)

    def setup(
        self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig
    ) -> None:
        self.search.setup(hydra_context=hydra_context, task_function=task_function, config=config)

    def sweep(self, arguments: list[str]) -> Any:
        return self.search.sweep(arguments)
