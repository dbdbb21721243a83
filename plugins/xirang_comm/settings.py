"""The settings of every ``comm=`` option, apart from the code that runs them: the config is
checked when it is composed, before any worker starts, and checking it imports no torch."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from xirang import ConfigError


@dataclass
class CommSettings:
    """Settings every comm option accepts.

    ``backend``: the torch.distributed backend; empty follows the device type.
    ``sync_period_ms``/``sync_slot``/``sync_slots``: a sync window (0 = none) for when no
    scheduler assigns one through the ``xirang_comm_sync_window`` hook.
    """

    backend: str = ""
    sync_period_ms: float = 0.0
    sync_slot: int = 0
    sync_slots: int = 1

    def check(self) -> None:
        """Raise :class:`ConfigError` naming a setting out of its range (an option's own
        settings add theirs)."""

    @classmethod
    def resolve(cls, settings: dict[str, Any]) -> dict[str, Any]:
        """The composed ``comm`` section, refused here when a value is out of range."""
        cls(**settings).check()
        return settings


@dataclass
class PowerSGDSettings(CommSettings):
    """``rank``: columns of P and Q (torch's ``matrix_approximation_rank``). ``start_iter``:
    backward passes of plain all-reduce first (torch's ``start_powerSGD_iter``; early gradients
    change direction too fast to compress). ``warm_start``: reuse last step's Q. ``seed``: the
    random first Q, equal on every worker (torch's ``random_seed``)."""

    rank: int = 4
    start_iter: int = 10
    warm_start: bool = True
    seed: int = 0

    def check(self) -> None:
        if self.rank < 1:
            raise ConfigError(f"comm.rank={self.rank}: PowerSGD's rank must be >= 1")
        if self.start_iter < 2:
            raise ConfigError(
                f"comm.start_iter={self.start_iter}: must be at least 2. torch's PowerSGD keeps "
                "its error feedback and warm start per DDP bucket, and DDP rebuilds its buckets "
                "after the first backward pass"
            )


@dataclass
class TopKSettings(CommSettings):
    """``ratio``: fraction of entries each worker sends per bucket."""

    ratio: float = 0.1

    def check(self) -> None:
        if not 0 < self.ratio <= 1:
            raise ConfigError(f"comm.ratio={self.ratio}: must be in (0, 1]")


@dataclass
class HierarchicalSettings(CommSettings):
    """``group_size``: ranks per group; 0 takes the groups from the device topology."""

    group_size: int = 0


@dataclass
class PeriodicSettings(CommSettings):
    """``every``: inner steps H between syncs. ``outer_lr``/``outer_momentum``: the outer
    Nesterov SGD step on the averaged change (1.0 and 0.0 make it plain averaging)."""

    every: int = 8
    outer_lr: float = 1.0
    outer_momentum: float = 0.0

    def check(self) -> None:
        if self.every < 1:
            raise ConfigError(f"comm.every={self.every}: must be at least 1")


@dataclass
class DiLoCoSettings(PeriodicSettings):
    """Defaults for runs of hundreds of steps: on the tiny GPT over 200 steps H=8 with momentum
    0.5 ended 2.9% above plain all-reduce's loss, the paper's momentum 0.9 (meant for H=500
    over tens of thousands of steps) 7% above."""

    every: int = 8
    outer_lr: float = 0.7
    outer_momentum: float = 0.5
