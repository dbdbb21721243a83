"""Event files through torch's ``SummaryWriter``; a restarted run adds a file to the same folder,
which TensorBoard reads as one run. The run's config goes in as hyperparameters (the HParams
plugin's records, in the run's own folder rather than the subfolder ``add_hparams`` makes, so the
HParams view lists the run beside its scalars)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from xirang.tracking import flatten

#: the scalars the HParams view shows beside each run's hyperparameters
HPARAM_METRICS = ("loss", "val_loss", "val_bpb")


@dataclass
class TensorBoardConfig:
    """logdir: where the event files go; empty = ``<run dir>/tensorboard``.
    flush_s: how often the writer's own thread flushes to disk."""

    logdir: str = ""
    flush_s: int = 30


class TensorBoardTracker:
    def __init__(self, logdir: str = "", flush_s: int = 30) -> None:
        self.logdir, self.flush_s = logdir, flush_s
        self.writer: Any = None

    def start(self, run_dir: Path, config: Mapping[str, Any], run_id: str | None) -> str:
        from torch.utils.tensorboard import SummaryWriter

        folder = run_id or self.logdir or str(run_dir / "tensorboard")
        self.writer = SummaryWriter(log_dir=folder, flush_secs=self.flush_s)
        self._log_hparams(config)
        return folder

    def _log_hparams(self, config: Mapping[str, Any]) -> None:
        """The config's settings as the HParams plugin's experiment and session-start records
        (what ``add_hparams`` writes, without its extra run folder); a resumed run writes them
        again into its new event file, with the same values."""
        from torch.utils.tensorboard.summary import hparams

        metrics = dict.fromkeys(HPARAM_METRICS, 0.0)  # the values come from the run's scalars
        for record in hparams(hparam_values(config), metrics):
            self.writer.file_writer.add_summary(record)

    def log(self, step: int, metrics: Mapping[str, float]) -> None:
        for key, value in metrics.items():
            self.writer.add_scalar(key, value, step)

    def finish(self, summary: Mapping[str, Any] | None, run_dir: Path) -> None:
        if summary is not None:
            text = json.dumps(summary, indent=2, default=str)
            self.writer.add_text("summary", f"```\n{text}\n```", summary.get("steps", 0))
        self.writer.close()


def hparam_values(config: Mapping[str, Any]) -> dict[str, bool | int | float | str]:
    """The config as dotted keys whose values the HParams plugin takes (a number, a bool or a
    string): a list or an empty setting is written as its JSON text."""
    return {
        key: value
        if isinstance(value, bool | int | float | str)
        else json.dumps(value, default=str)
        for key, value in flatten(config).items()
    }
