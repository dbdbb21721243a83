"""A W&B run; offline unless the user has logged in, so no run ever needs the network.

Offline runs land in ``<run dir>/wandb/offline-run-*``; ``wandb sync <that folder>`` uploads
them later. A restarted run continues the same run id (each restart adds an offline folder of
that id, and ``wandb sync`` merges them)."""

from __future__ import annotations

import netrc
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, get_args
from urllib.parse import urlparse

from xirang.tracking import flatten

#: ``tracker.wandb.mode``: ``auto`` picks one of the others (:func:`resolve_mode`)
Mode = Literal["auto", "offline", "online", "disabled"]
MODES = get_args(Mode)


@dataclass
class WandbConfig:
    """mode: ``auto`` = online when logged in (``wandb login`` or ``WANDB_API_KEY``), else
        offline; ``WANDB_MODE`` in the environment wins over it.
    project / entity: where the run goes; empty project = the run's ``project``."""

    mode: str = "auto"
    project: str = ""
    entity: str = ""

    @staticmethod
    def resolve(settings: dict[str, Any]) -> dict[str, Any]:
        """Checked when the config is composed, before any worker starts."""
        if settings["mode"] not in MODES:
            from xirang import ConfigError

            raise ConfigError(
                f"tracker.wandb.mode={settings['mode']!r}: not one of {', '.join(MODES)}"
            )
        return settings


class WandbTracker:
    def __init__(self, mode: Mode = "auto", project: str = "", entity: str = "") -> None:
        self.mode, self.project, self.entity = mode, project, entity
        self.run: Any = None

    def start(self, run_dir: Path, config: Mapping[str, Any], run_id: str | None) -> str:
        import wandb

        settings = wandb.Settings(console="off", silent=True, disable_git=True)
        self.run = wandb.init(
            project=self.project or str(config.get("project") or "xirang"),
            entity=self.entity or None,
            name=run_dir.name,
            dir=str(run_dir),
            mode=resolve_mode(self.mode),
            id=run_id,
            resume="allow" if run_id else None,
            config=flatten(config),
            settings=settings,
        )
        return self.run.id

    def log(self, step: int, metrics: Mapping[str, float]) -> None:
        self.run.log(dict(metrics), step=step)

    def finish(self, summary: Mapping[str, Any] | None, run_dir: Path) -> None:
        if summary is not None:
            self.run.summary.update(
                {k: v for k, v in summary.items() if isinstance(v, int | float | str)}
            )
        self.run.finish(exit_code=0 if summary is not None else 1)


def resolve_mode(mode: Mode) -> Literal["offline", "online", "disabled"] | None:
    """``auto``: online if logged in, else offline; None lets ``WANDB_MODE`` decide."""
    if os.environ.get("WANDB_MODE"):
        return None
    if mode != "auto":
        return mode
    return "online" if logged_in() else "offline"


def logged_in() -> bool:
    """Whether W&B has credentials here: ``WANDB_API_KEY``, or what ``wandb login`` wrote to
    the netrc file for the W&B host (read without touching the network)."""
    if os.environ.get("WANDB_API_KEY"):
        return True
    host = urlparse(os.environ.get("WANDB_BASE_URL", "https://api.wandb.ai")).hostname or ""
    try:
        return netrc.netrc(os.environ.get("NETRC")).authenticators(host) is not None
    except (OSError, netrc.NetrcParseError):
        return False
