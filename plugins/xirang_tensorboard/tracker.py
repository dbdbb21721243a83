"""Event files through torch's ``SummaryWriter``; a restarted run adds a file to the same folder,
which TensorBoard reads as one run."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any


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
        return folder

    def log(self, step: int, metrics: Mapping[str, float]) -> None:
        for key, value in metrics.items():
            self.writer.add_scalar(key, value, step)

    def finish(self, summary: Mapping[str, Any] | None, run_dir: Path) -> None:
        if summary is not None:
            text = json.dumps(summary, indent=2, default=str)
            self.writer.add_text("summary", f"```\n{text}\n```", summary.get("steps", 0))
        self.writer.close()
