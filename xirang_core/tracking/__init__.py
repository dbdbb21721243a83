"""Experiment trackers, the kernel's part: the ``tracker`` config group checked at compose
(:mod:`~xirang_core.tracking.config`). What every tracker plugin's run-event hooks do (a
session per tracker on the main worker, each step sent once) is the SDK's
:mod:`xirang.tracking`; names imported from here by older plugins resolve there, warned."""

from __future__ import annotations

from xirang_core.moved import renamed

#: names that moved to the SDK (:mod:`xirang.tracking.events`), unchanged
_MOVED = ("flatten", "on_fault", "on_run_end", "on_run_start", "on_step_end", "run_event_hooks")

__getattr__ = renamed(__name__, {n: n for n in _MOVED}, home="xirang.tracking.events")
