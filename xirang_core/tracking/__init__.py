"""Experiment trackers, the kernel's part: the ``tracker`` config group checked at compose
(:mod:`~xirang_core.tracking.config`). What every tracker plugin's run-event hooks do (a
session per tracker on the main worker, each step sent once) is the SDK's
:mod:`xirang.tracking`."""
