"""Settings of the ``checkpoint`` config group (``conf/checkpoint/*.yaml``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from xirang_core.checkpoint.interval import Interval
from xirang_core.checkpoint.signing import signing_key
from xirang_core.errors import ConfigError


@dataclass
class CheckpointConfig:
    """Validated by the core like any group; see docs/checkpoint.md for each setting.

    uri: where checkpoints go; empty = ``<run dir>/checkpoints``; ``s3://...`` through a tier.
    interval: ``N`` steps, ``<M>m``/``<M>min``, ``auto`` (Young/Daly from save cost and
        ``mtbf_hours``) or 0 for the end of the run only.
    resume: ``auto`` (latest valid checkpoint in ``uri``), ``never``, or a checkpoint path
        (a ``step-<N>`` folder, or a checkpoint root whose newest valid one is taken).
    heartbeat_s / hang_timeout_s: each worker writes ``heartbeat/rank<r>.json`` every
        ``heartbeat_s``; a worker whose step has not advanced for ``hang_timeout_s`` (0 = never)
        exits so the launcher restarts the run from the latest checkpoint.
    """

    name: str = "default"
    uri: str = ""
    interval: str = "auto"
    mtbf_hours: float = 24.0
    keep: int = 3
    keep_every: int = 0
    resume: str = "auto"
    async_save: bool = True
    incremental: bool = True
    chunk_mb: float = 4.0
    final: bool = True
    heartbeat_s: float = 5.0
    hang_timeout_s: float = 0.0


def check_checkpoint(settings: dict[str, Any]) -> None:
    """What the schema's types cannot say, checked when the config is composed, so a bad value
    stops the run with one message before any worker starts (not in every worker after)."""
    Interval.parse(settings["interval"])
    signing_key()  # a key too short, or a key file others may read, stops the run here
    if settings["mtbf_hours"] <= 0:
        raise ConfigError(
            f"checkpoint.mtbf_hours={settings['mtbf_hours']}: the mean time between failures "
            f"must be a positive number of hours (e.g. 24)"
        )
