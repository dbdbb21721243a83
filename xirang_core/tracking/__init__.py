"""Experiment trackers, the kernel's part: the ``tracker`` config group checked at compose
(:mod:`~xirang_core.tracking.config`). What every tracker plugin's run-event hooks do (a
session per tracker on the main worker, each step sent once) is the SDK's
:mod:`xirang.tracking`; names imported from here by older plugins resolve there, warned."""

from __future__ import annotations

import importlib
import warnings
from typing import Any

#: names that moved to the SDK (:mod:`xirang.tracking.events`)
_MOVED = ("flatten", "on_fault", "on_run_end", "on_run_start", "on_step_end", "run_event_hooks")


def __getattr__(name: str) -> Any:
    if name not in _MOVED:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    warnings.warn(
        f"xirang_core.tracking.{name} moved to xirang.tracking; the old name goes in the next "
        "release",
        DeprecationWarning,
        stacklevel=2,
    )
    return getattr(importlib.import_module("xirang.tracking.events"), name)
